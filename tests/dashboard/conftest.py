"""Fixtures for the dashboard tests: an admin, sockets through the real ASGI application (origin
check, session auth, routing), the channel layer (in-memory or Redis), and the tailer's cleanup."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import override_settings

from dashboard.frames import join
from dashboard.live import State, apply
from dashboard.tailer import Tailer
from tests.support.accounts import make_admin, session_cookie

REDIS_URL = os.environ.get("GPUSCHED_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
ORIGIN = b"http://localhost"

# Quick tailer for tests: the semantics are the same, only the waits are shorter.
FAST = {
    "DASHBOARD_POLL_SECONDS": 0.01,
    "DASHBOARD_COALESCE_SECONDS": 0.05,
}


def redis_available() -> bool:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=1).ping()
    except redis.RedisError:
        return False
    return True


def layer_settings(kind: str) -> dict[str, Any]:
    if kind == "memory":
        return {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    return {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            # A prefix per test: parallel test processes share the Redis server and user ids.
            "CONFIG": {
                "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
                "prefix": f"gpusched-test-{uuid.uuid4().hex[:8]}",
            },
        }
    }


@pytest.fixture(params=["memory", "redis"])
def layer(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test using this runs on the in-memory layer and on channels-redis."""
    if request.param == "redis" and not redis_available():
        pytest.skip(f"no Redis at {REDIS_URL}")
    with override_settings(CHANNEL_LAYERS=layer_settings(request.param), **FAST):
        yield request.param


@pytest.fixture
async def tailers() -> AsyncIterator[None]:
    """Stops this event loop's tailer after the test, and closes the database connections of the
    tailer's thread and of sync_to_async's: PostgreSQL cannot drop a test database in use."""
    yield
    await Tailer.stop_all()
    await sync_to_async(connections.close_all)()


async def admin_cookie(username: str = "admin", *, staff: bool = True) -> bytes:
    def login() -> bytes:
        return session_cookie(make_admin(username, staff=staff))

    return await sync_to_async(login)()


def communicator(
    path: str, cookie: bytes | None = None, origin: bytes | None = ORIGIN
) -> WebsocketCommunicator:
    from gpusched.asgi import application

    headers = [(b"host", b"localhost")]
    if origin is not None:
        headers.append((b"origin", origin))
    if cookie is not None:
        headers.append((b"cookie", cookie))
    return WebsocketCommunicator(application, path, headers=headers)


class Client_:
    """A socket plus the state it has built from what it received (as live.js builds it)."""

    def __init__(self, socket: WebsocketCommunicator) -> None:
        self.socket = socket
        self.state: State = {}
        self.id: int | None = None
        self.epoch: str | None = None
        self.messages: list[dict[str, Any]] = []
        self.frames: list[str] = []

    async def receive(self, timeout: float = 5.0) -> dict[str, Any]:
        """The next message, its frames joined (dashboard/frames.py), as live.js joins them."""
        texts = [await self.socket.receive_from(timeout=timeout)]
        parts = json.loads(texts[0]).get("parts", 1)
        while len(texts) < parts:
            texts.append(await self.socket.receive_from(timeout=timeout))
        self.frames.extend(texts)
        (message,) = join(texts)
        self.messages.append(message)
        if message["type"] == "snapshot":
            self.state = message["state"]
            self.id, self.epoch = message["id"], message["epoch"]
        elif message["type"] == "delta":
            assert message["epoch"] == self.epoch
            assert message["from"] <= self.id < message["id"]
            apply(self.state, message["changes"])
            self.id = message["id"]
        elif message["type"] == "sample":
            apply(self.state, message["changes"])
        return message

    async def until(
        self, done: Callable[[Client_], bool], timeout: float = 10.0
    ) -> list[dict[str, Any]]:
        """Receive until `done(self)` holds; returns what arrived meanwhile."""
        received: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while not done(self):
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; got {received}")
            received.append(await self.receive(timeout=left))
        return received

    async def until_id(self, event_id: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        return await self.until(lambda c: c.id is not None and c.id >= event_id, timeout)

    async def quiet(self, seconds: float = 0.3) -> None:
        """Nothing else arrives for a while."""
        await asyncio.sleep(seconds)
        assert await self.socket.receive_nothing(timeout=0.05)


async def connect(
    path: str, cookie: bytes, query: str = "", origin: bytes | None = ORIGIN
) -> Client_:
    socket = communicator(path + query, cookie, origin)
    connected, _ = await socket.connect(timeout=10)
    assert connected
    return Client_(socket)


def outbox_only(state: State, view: str) -> State:
    """The outbox-backed slices of a view's state (sampled telemetry left out)."""
    sampled = {
        "cluster": {"stranded", "telemetry", "sources"},
        "node": {"telemetry", "series"},
        "tenants": {"series", "efficiency", "advice", "window"},
        "queues": {"starts"},
    }
    return {name: docs for name, docs in state.items() if name not in sampled.get(view, set())}
