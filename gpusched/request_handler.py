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
"""

from __future__ import annotations

import asyncio
import weakref

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.handlers.asgi import ASGIHandler
from django.http import HttpRequest, HttpResponseBase

PROBES = frozenset({"/healthz", "/readyz"})


class RequestHandler(ASGIHandler):
    def __init__(self) -> None:
        self.threads = settings.WEB_REQUEST_THREADS
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )
        super().__init__()

    def load_middleware(self, is_async: bool = False) -> None:
        super().load_middleware(is_async=False)

    async def get_response_async(self, request: HttpRequest) -> HttpResponseBase:
        respond = sync_to_async(self.get_response, thread_sensitive=True)
        if request.path in PROBES:
            return await respond(request)
        async with self._slots_of_this_loop():
            return await respond(request)

    def _slots_of_this_loop(self) -> asyncio.Semaphore:
        # One per event loop: an asyncio semaphore belongs to the loop that first waits on it (a
        # server has one loop; tests start several).
        loop = asyncio.get_running_loop()
        slots = self._slots.get(loop)
        if slots is None:
            slots = self._slots[loop] = asyncio.Semaphore(self.threads)
        return slots
