"""Redis (the channel layer and the API's throttle cache) crashes and comes back, under two web
processes, on a private redis-server (the machine's shared Redis is never touched)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from django.db import connection

from api import services as api_services
from dashboard.live import State, apply
from tests.dashboard.servers import set_cordoned, web_server
from tests.faults.servers import Api, PrivateRedis, http, private_redis, tail, workload_body
from tests.scheduling import factories
from tests.support.accounts import make_admin, session_cookie

pytestmark = [pytest.mark.django_db(transaction=True)]

PAGES = ["/", "/placements/", "/queues/", "/tenants/"]
RECONNECT_S = 0.3
# A client's drops from Redis's death to the end: the drop itself (the server closes the socket,
# 1011) and, once Redis is back, a few more: each connection still in the web process's
# channels-redis pool fails once (a refused handshake or a 1011 close) before fresh ones replace
# them. A few reconnects, not a storm.
DROPS_AFTER_RESTART = 4


class LiveClient:
    """The Cluster view's socket as live.js keeps it: its state from a snapshot plus deltas, and
    after a drop (or a refused handshake) a reconnect that resumes with ?since=<id>&epoch=."""

    def __init__(self, session: aiohttp.ClientSession, base: str, cookie: bytes) -> None:
        self.session = session
        self.base = base
        self.headers = {"Cookie": cookie.decode(), "Origin": base}
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.state: State = {}
        self.id: int | None = None
        self.epoch: str | None = None
        self.drops = 0

    async def _open(self) -> aiohttp.ClientWebSocketResponse:
        url = f"{self.base.replace('http', 'ws')}/ws/live/cluster/"
        if self.id is not None and self.epoch:
            url += f"?since={self.id}&epoch={self.epoch}"
        return await self.session.ws_connect(url, headers=self.headers)

    async def _receive(self, deadline: float) -> None:
        """Receive and apply one message, reconnecting as often as needed before `deadline`."""
        loop = asyncio.get_running_loop()
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"{self.base}: no message in time ({self.drops} drops)")
            try:
                if self.ws is None:
                    self.ws = await self._open()
                message = await self.ws.receive(timeout=left)
            except TimeoutError:
                continue  # the deadline check above reports it
            except aiohttp.ClientError:  # refused handshake, connection error
                message = None
            if message is not None and message.type is aiohttp.WSMsgType.TEXT:
                self._apply(json.loads(message.data))
                return
            self.drops += 1  # closed by the server (1011: the application failed), or refused
            if self.ws is not None:
                await self.ws.close()
            self.ws = None
            await asyncio.sleep(RECONNECT_S)

    def _apply(self, message: dict[str, Any]) -> None:
        if message["type"] == "snapshot":
            self.state, self.id, self.epoch = message["state"], message["id"], message["epoch"]
        elif message["type"] == "delta":
            assert message["epoch"] == self.epoch and self.id is not None
            assert message["from"] <= self.id < message["id"], (message["from"], self.id)
            apply(self.state, message["changes"])
            self.id = message["id"]
        elif message["type"] == "sample":
            apply(self.state, message["changes"])

    async def until(self, event_id: int, timeout: float = 20.0) -> State:
        """Receive until the state covers outbox event `event_id`; the state."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.id is None or self.id < event_id:
            await self._receive(deadline)
        return self.state

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()


def http_checks(base: str, cookie: bytes, api: Api, name: str) -> dict[str, int]:
    """What a browser and a tenant get from one web process: status per request."""
    statuses = {"/healthz": http("GET", f"{base}/healthz")[0]}
    for page in PAGES:
        statuses[page] = http("GET", base + page, headers={"Cookie": cookie.decode()})[0]
    statuses["GET /api/v1/workloads"] = api.get("/api/v1/workloads")[0]
    statuses["POST /api/v1/workloads"] = api.submit(workload_body(name, pods=1, gpus=1))
    return statuses


SERVING = {
    "/healthz": 200,
    **{page: 200 for page in PAGES},
    "GET /api/v1/workloads": 200,
    "POST /api/v1/workloads": 201,
}


@pytest.mark.slow
def test_redis_down_web_keeps_serving_and_live_updates_resume(tmp_path: Path) -> None:
    """Fault: the Redis behind two web processes (channels-redis layer, throttle cache) is
    killed (SIGKILL) and, a little later, started again on the same port, empty.

    Expected while it is down: every web process keeps answering HTTP: /healthz 200, the
    dashboard pages 200 for a signed-in admin, the tenant API (list and submit) 200/201 - only
    live fan-out is degraded. Expected once it is back, without restarting a web process: live
    updates resume: a dashboard client on each process (reconnecting after drops as the
    browser does, a few at most) gets the change made during the outage and a delta for a change
    made after Redis is back."""
    names = [node.name for node in factories.nodes(2)]
    cookie = session_cookie(make_admin())
    _, _, token = api_services.tenant_onboard(name="team-a")
    connection.close()

    async def scenario(redis_server: PrivateRedis, bases: list[str]) -> None:
        apis = [Api(base, token) for base in bases]
        async with aiohttp.ClientSession() as session:
            clients = [LiveClient(session, base, cookie) for base in bases]
            # Live updates work: a change reaches the client on each process.
            for client in clients:
                await client.until(0)
            event_id = await asyncio.to_thread(set_cordoned, names[0], True)
            for client in clients:
                assert (await client.until(event_id))["nodes"][names[0]]["cordoned"] is True
                assert client.drops == 0

            redis_server.kill()
            for k, (base, api) in enumerate(zip(bases, apis, strict=True)):
                statuses = await asyncio.to_thread(http_checks, base, cookie, api, f"down-{k}")
                assert statuses == SERVING, f"{base} while Redis is down: {statuses}"
            # A change while the fan-out is down: the tailers cannot push it.
            during = await asyncio.to_thread(set_cordoned, names[1], True)
            await asyncio.sleep(1.0)

            redis_server.start()  # the same port, nothing in it
            for k, (base, api) in enumerate(zip(bases, apis, strict=True)):
                statuses = await asyncio.to_thread(http_checks, base, cookie, api, f"back-{k}")
                assert statuses == SERVING, f"{base} after Redis is back: {statuses}"
            drops = [client.drops for client in clients]
            for client in clients:  # nothing lost: the change made during the outage
                assert (await client.until(during))["nodes"][names[1]]["cordoned"] is True
            after = await asyncio.to_thread(set_cordoned, names[0], False)
            for client, before in zip(clients, drops, strict=True):
                state = await client.until(after)
                assert state["nodes"][names[0]]["cordoned"] is False
                assert state["nodes"][names[1]]["cordoned"] is True
                assert client.drops - before <= DROPS_AFTER_RESTART, client.drops
            for client in clients:
                await client.close()

    logs = [tmp_path / "web-a.log", tmp_path / "web-b.log"]
    with (
        private_redis() as redis_server,
        web_server(redis_url=redis_server.url, log=logs[0]) as a,
        web_server(redis_url=redis_server.url, log=logs[1]) as b,
    ):
        try:
            asyncio.run(scenario(redis_server, [a, b]))
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- web a:\n{tail(logs[0])}") from None


def test_the_first_socket_after_redis_returns_is_accepted(tmp_path: Path) -> None:
    """The web process's channels-redis pool still holds connections to the Redis that died:
    the first socket to use one got a 500 handshake. It must be accepted (its first layer
    call retried on a fresh connection) and get its snapshot."""
    factories.nodes(1)
    cookie = session_cookie(make_admin())
    connection.close()

    async def open_socket(session: aiohttp.ClientSession, base: str) -> dict[str, Any]:
        url = f"{base.replace('http', 'ws')}/ws/live/cluster/"
        headers = {"Cookie": cookie.decode(), "Origin": base}
        async with session.ws_connect(url, headers=headers) as ws:
            message = await ws.receive(timeout=20)
            assert message.type is aiohttp.WSMsgType.TEXT, message
            return dict(json.loads(message.data))

    async def scenario(redis_server: PrivateRedis, base: str) -> None:
        async with aiohttp.ClientSession() as session:
            # Sockets that put connections into the pool (they stay there after closing), and
            # one that stays open across the restart.
            for _ in range(3):
                assert (await open_socket(session, base))["type"] == "snapshot"
            url = f"{base.replace('http', 'ws')}/ws/live/cluster/"
            headers = {"Cookie": cookie.decode(), "Origin": base}
            kept = await session.ws_connect(url, headers=headers)
            await kept.receive(timeout=20)
            redis_server.kill()
            await asyncio.sleep(1.0)
            redis_server.start()
            await asyncio.sleep(0.5)
            for _ in range(3):  # every new socket, the first included, is accepted
                assert (await open_socket(session, base))["type"] == "snapshot"
            await kept.close()

    log = tmp_path / "web.log"
    with private_redis() as redis_server, web_server(redis_url=redis_server.url, log=log) as base:
        try:
            asyncio.run(scenario(redis_server, base))
        except (AssertionError, aiohttp.ClientError) as exc:
            raise AssertionError(f"{exc!r}\n--- web:\n{tail(log)}") from None
