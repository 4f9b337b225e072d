"""Several web processes on channels-redis, as in production: each tails the outbox itself and
fans out to its own sockets, so a change committed by another process (here: the test) reaches
every dashboard exactly once, whichever replica it is connected to."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from tests.dashboard.conftest import REDIS_URL, make_admin, redis_available, session_cookie
from tests.dashboard.servers import set_cordoned, web_server
from tests.scheduling import factories

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.skipif(not redis_available(), reason=f"no Redis at {REDIS_URL}"),
]


class Socket:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.id: int | None = None
        self.epoch: str | None = None

    async def receive(self, timeout: float = 10) -> dict[str, Any]:
        message = json.loads(await self.ws.receive_str(timeout=timeout))
        if message["type"] in ("snapshot", "delta"):
            self.id, self.epoch = message["id"], message["epoch"]
        return message

    async def deltas_until(self, event_id: int) -> list[dict[str, Any]]:
        got = []
        while self.id is None or self.id < event_id:
            message = await self.receive()
            if message["type"] == "delta":
                got.append(message)
        return got

    async def nothing_more(self, seconds: float = 1.0) -> None:
        """No other delta (samples of telemetry may come)."""
        try:
            while True:
                message = await self.receive(timeout=seconds)
                assert message["type"] == "sample", message
        except TimeoutError:
            pass


@pytest.mark.slow
def test_every_replica_delivers_each_change_once() -> None:
    names = [node.name for node in factories.nodes(2)]
    cookie = session_cookie(make_admin())

    async def scenario(a: str, b: str) -> None:
        async with aiohttp.ClientSession() as http:

            async def connect(base: str, query: str = "") -> Socket:
                ws = await http.ws_connect(
                    f"{base.replace('http', 'ws')}/ws/live/cluster/{query}",
                    headers={"Cookie": cookie.decode(), "Origin": base},
                )
                return Socket(ws)

            sockets = [await connect(a), await connect(a), await connect(b), await connect(b)]
            for socket in sockets:
                assert (await socket.receive())["type"] == "snapshot"
            assert sockets[0].epoch != sockets[2].epoch  # two processes, two kept states

            # Idle for longer than redis-py 8's default read timeout: the sockets stay up.
            await asyncio.sleep(6.5)
            event_id = await asyncio.to_thread(set_cordoned, names[0])
            for socket in sockets:
                deltas = await socket.deltas_until(event_id)
                assert len(deltas) == 1, deltas
                assert deltas[0]["changes"]["nodes"]["set"][names[0]]["cordoned"] is True
            await asyncio.gather(*(socket.nothing_more() for socket in sockets))

            # Resuming: exact on the same process; elsewhere the epoch differs: a snapshot.
            seen = sockets[0]
            query = f"?since={seen.id}&epoch={seen.epoch}"
            same = await connect(a, query)
            assert (await same.receive())["type"] != "snapshot"
            other = await connect(b, query)
            assert (await other.receive())["type"] == "snapshot"
            for socket in [*sockets, same, other]:
                await socket.ws.close()

    with web_server(redis_url=REDIS_URL) as a, web_server(redis_url=REDIS_URL) as b:
        asyncio.run(scenario(a, b))
