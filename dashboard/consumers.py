"""Dashboard websockets: one read-only consumer per view.

A socket is accepted only for a signed-in staff user (the dashboard is for platform admins) and,
through AllowedHostsOriginValidator in gpusched/asgi.py, only from the site's own origin. On
connect it joins its user's group on the channel layer (signing out closes it, in every process),
then subscribes to its view in this process's tailer with what it missed since
`?since=<event id>&epoch=<epoch>` (or a snapshot). After that the tailer hands it the deltas as
they come (`deliver`), each serialized once for every socket (in frames of bounded size,
dashboard/frames.py); it skips what the first message already covered, and a gap or a rebuilt
view makes it send a fresh snapshot instead.

Async on purpose: a delta fans out to hundreds of sockets per process, and the consumer never
touches the database itself (the tailer does, on its own thread).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar
from urllib.parse import parse_qs

import redis
from channels.generic.websocket import AsyncWebsocketConsumer

from dashboard.live import view_for
from dashboard.tailer import Live, Tailer
from dashboard.web_metrics import websocket_clients

logger = logging.getLogger(__name__)

# Close codes (4000-4999 are the application's): the browser reconnects on the others.
CLOSE_SIGNED_OUT = 4401
CLOSE_TRY_AGAIN = 1013  # RFC 6455 "Try Again Later": the channel layer is away
LAYER_ATTEMPTS = 3
LAYER_ERRORS = (OSError, redis.RedisError)


def user_group(user_id: int) -> str:
    """Every socket of one user, in every web process: closed when that user signs out."""
    return f"live-user.{user_id}"


class LiveConsumer(AsyncWebsocketConsumer):
    view: ClassVar[str]

    key: str | None = None
    tailer: Tailer | None = None
    epoch: str | None = None
    cursor: int = -1
    counted: bool = False  # in the gpusched_websocket_clients gauge

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # One message at a time on the socket: the catch-up on connect, then each delivered one,
        # so the frames of two messages never interleave.
        self._sending = asyncio.Lock()

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated or not user.is_staff:
            await self.close()  # before accept: the handshake is refused (HTTP 403)
            return
        key = self.view_key(self.scope["url_route"]["kwargs"])
        try:
            view_for(key)
        except KeyError:
            await self.close()
            return
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        since = _int(query.get("since", [""])[0])
        epoch = query.get("epoch", [""])[0] or None

        self.tailer = Tailer.for_running_loop()
        try:
            await self._layer("group_add", user_group(user.pk))
        except LAYER_ERRORS as exc:  # the channel layer's Redis is away: come back later
            logger.warning("dashboard socket: channel layer unavailable: %s", exc)
            await self.accept()
            await self.close(code=CLOSE_TRY_AGAIN)
            self.tailer = None
            return
        await self.accept()
        websocket_clients.labels(view=self.view).inc()
        self.counted = True
        async with self._sending:
            live, messages = await self.tailer.attach(key, since, epoch, self)
            self.key = key
            await self._sent(live, messages)

    def view_key(self, kwargs: dict[str, Any]) -> str:
        return self.view

    async def _layer(self, operation: str, group: str) -> None:
        """A group operation, tried again on a fresh connection when it fails: after Redis
        restarts, the layer's pool still holds connections to the old one, and the first use of
        each fails (it was a 500 handshake for the first socket after an outage)."""
        for attempt in range(LAYER_ATTEMPTS):
            try:
                await getattr(self.channel_layer, operation)(group, self.channel_name)
                return
            except LAYER_ERRORS:
                if attempt == LAYER_ATTEMPTS - 1:
                    raise

    async def disconnect(self, code: int) -> None:
        if self.counted:
            websocket_clients.labels(view=self.view).dec()
            self.counted = False
        if self.tailer is None:
            return
        user = self.scope.get("user")
        try:
            if user is not None and user.is_authenticated:
                await self._layer("group_discard", user_group(user.pk))
        except LAYER_ERRORS as exc:  # the groups expire in Redis by themselves
            logger.info("dashboard socket: leaving its groups failed: %s", exc)
        if self.key is not None:
            self.tailer.detach(self.key, self)
            self.key = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The dashboard only listens; a "ping" is answered so clients can check the line."""
        if text_data == "ping":
            await self.send(text_data="pong")

    # --- messages from the tailer (and live.close from the user's group) --------------------

    async def deliver(self, message: dict[str, Any]) -> None:
        """tailer.Subscriber: the tailer's live.delta, live.sample and live.reset."""
        async with self._sending:
            await self._handle(message)

    async def dispatch(self, message: dict[str, Any]) -> None:
        # Channels closes stale database connections before every handler, through a thread hop;
        # the live.* handlers never touch the database.
        if message["type"].startswith("live."):
            await self._handle(message)
            return
        await super().dispatch(message)

    async def _handle(self, message: dict[str, Any]) -> None:
        await getattr(self, message["type"].replace(".", "_"))(message)

    async def live_delta(self, message: dict[str, Any]) -> None:
        if self.key is None or message["epoch"] != self.epoch or message["to"] <= self.cursor:
            return  # covered by what this socket got first, or of a view epoch it left
        if message["from"] > self.cursor:
            logger.info("dashboard socket missed deltas of %s; sending a snapshot", self.key)
            await self._resync()
            return
        await self._send_all(message["frames"])
        self.cursor = message["to"]

    async def live_sample(self, message: dict[str, Any]) -> None:
        if self.key is not None:
            await self._send_all(message["frames"])

    async def live_reset(self, message: dict[str, Any]) -> None:
        if self.key is not None and message["epoch"] != self.epoch:
            await self._resync()

    async def live_close(self, message: dict[str, Any]) -> None:
        await self.close(code=CLOSE_SIGNED_OUT)

    async def _resync(self) -> None:
        assert self.tailer is not None and self.key is not None
        live = await self.tailer.snapshot(self.key)
        await self._sent(live, live.snapshot_frames())

    async def _sent(self, live: Live, texts: list[str]) -> None:
        self.epoch, self.cursor = live.epoch, live.cursor
        await self._send_all(texts)

    async def _send_all(self, texts: list[str]) -> None:
        """Frames in order: the parts of one message are never interleaved with another's
        (a consumer handles one message at a time; dashboard/frames.py)."""
        for text in texts:
            await self.send(text_data=text)


class ClusterConsumer(LiveConsumer):
    view = "cluster"


class PlacementsConsumer(LiveConsumer):
    view = "placements"


class QueuesConsumer(LiveConsumer):
    view = "queues"


class TenantsConsumer(LiveConsumer):
    view = "tenants"


class NodeConsumer(LiveConsumer):
    view = "node"

    def view_key(self, kwargs: dict[str, Any]) -> str:
        return f"node:{kwargs['name']}"


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None
