"""The web process's HTTP handler: Django's ASGI handler, with each request's middleware and view
run on one thread, and at most WEB_REQUEST_THREADS requests running at once.

Why the chain runs on the request's thread: under ASGI, Django runs the middleware chain on the
event loop and sends every hook of every MiddlewareMixin middleware (all of Django's own) to the
request's thread and back, about a dozen thread hops per request, each a wake-up of the loop and a
hand-off of the GIL. Here the chain is built as WSGI builds it, so a request goes to its thread
once. An async view (the Cluster page) is still run on the loop, through Django's adapter.

Why a limit: a process runs one thread of Python at a time, and Django gives every request in
flight a thread of its own. Under bench_stack's tenants each web replica had many of them runnable
at once, all queued for the GIL and the cores ahead of the event loop and the dashboard tailer: a
tailer step that needed 9 ms of CPU took 80 ms, and every delta waited for it (docs/benchmarks.md).
A request beyond the limit waits on the loop for a free thread, which costs nothing while it waits.
The probes (/healthz, /readyz) do not wait: a replica busy with tenants is alive and ready, and a
probe that timed out in the queue would have kubelet restart it or take it out of service.

Why callers take turns: in one line, a tenant that sends a hundred requests at once would have every
other caller wait behind all of them. A freed thread goes to the caller (an API token, a session,
else an address) whose turn it is, and a caller with more requests waiting goes to the back.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import weakref
from collections import deque
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

PROBES = frozenset({"/healthz", "/readyz"})


class RequestHandler(ASGIHandler):
    def __init__(self) -> None:
        self.threads = settings.WEB_REQUEST_THREADS
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, FairSlots] = (
            weakref.WeakKeyDictionary()
        )
        super().__init__()

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        respond = sync_to_async(self.get_response, thread_sensitive=True)
        if request.path in PROBES:
            return await respond(request)
        async with self._slots_of_this_loop().slot(caller_of(request)):
            return await respond(request)

    def _slots_of_this_loop(self) -> FairSlots:
        # One per event loop: its futures belong to the loop that made them (a server has one
        # loop; tests start several).
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = FairSlots(self.threads)
        return slots


def caller_of(request: HttpRequest) -> str:
    """Who a request is, to take turns by: its credentials (an API token, a session cookie), else
    the address it came from. Only a digest is kept."""
    credential = request.headers.get("Authorization") or request.COOKIES.get(
        settings.SESSION_COOKIE_NAME
    )
    who = f"credential {credential}" if credential else f"address {request.META.get('REMOTE_ADDR')}"
    return hashlib.blake2b(who.encode(), digest_size=16).hexdigest()


class FairSlots:
    """At most `size` holders at once. A freed slot goes to the first caller in turn order (the
    order callers started waiting), which then moves to the back if it has more requests waiting:
    callers take turns, each caller's own requests in the order they came."""

    def __init__(self, size: int) -> None:
        self.free = size
        # A dict keeps insertion order: the turn order.
        self.waiting: dict[str, deque[asyncio.Future[None]]] = {}

    @contextlib.asynccontextmanager
    async def slot(self, caller: str) -> AsyncIterator[None]:
        if self.free > 0 and not self.waiting:
            self.free -= 1
        else:
            turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self.waiting.setdefault(caller, deque()).append(turn)
            try:
                await turn
            except asyncio.CancelledError:
                if turn.done() and not turn.cancelled():
                    self._hand_on()  # given a slot, then cancelled before it could run
                else:
                    self._forget(caller, turn)
                raise
        try:
            yield
        finally:
            self._hand_on()

    def _hand_on(self) -> None:
        if not self.waiting:
            self.free += 1
            return
        caller = next(iter(self.waiting))
        turns = self.waiting.pop(caller)
        turn = turns.popleft()
        if turns:
            self.waiting[caller] = turns  # to the back
        turn.set_result(None)

    def _forget(self, caller: str, turn: asyncio.Future[None]) -> None:
        turns = self.waiting.get(caller)
        if turns is None:
            return
        with contextlib.suppress(ValueError):
            turns.remove(turn)
        if not turns:
            del self.waiting[caller]
