"""gpusched/request_handler.py: a request's middleware and view run on one thread, at most
WEB_REQUEST_THREADS at once, the probes never wait. Driven as the server drives it (an ASGI
HTTP scope), with this module as the URL conf."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from channels.testing import HttpCommunicator
from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.test import override_settings
from django.urls import path

from gpusched.request_handler import RequestHandler
from gpusched.views import healthz
from tests.fresh_settings import run


class Calls:
    """What the views and the middleware below saw, and a gate that holds the slow view."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.threads: dict[str, set[int]] = {}
        self.running = 0
        self.most_running = 0
        self.gate = threading.Event()
        self.served: list[str] = []

    def saw(self, where: str) -> None:
        with self.lock:
            self.threads.setdefault(where, set()).add(threading.get_ident())


calls = Calls()


def record_thread(get_response: Callable[[HttpRequest], HttpResponseBase]) -> Any:
    def middleware(request: HttpRequest) -> HttpResponseBase:
        calls.saw("middleware")
        return get_response(request)

    return middleware


def quick(request: HttpRequest) -> HttpResponse:
    calls.saw("view")
    return HttpResponse("quick")


def slow(request: HttpRequest) -> HttpResponse:
    with calls.lock:
        calls.running += 1
        calls.most_running = max(calls.most_running, calls.running)
    try:
        calls.gate.wait(timeout=10)
    finally:
        with calls.lock:
            calls.running -= 1
    return HttpResponse("slow")


def whose(request: HttpRequest) -> HttpResponse:
    with calls.lock:
        calls.served.append(request.headers["Authorization"])
    return HttpResponse("whose")


async def on_the_loop(request: HttpRequest) -> HttpResponse:
    asyncio.get_running_loop()  # raises off the loop
    calls.saw("async view")
    return HttpResponse("async")


urlpatterns = [
    path("quick", quick),
    path("slow", slow),
    path("whose", whose),
    path("async", on_the_loop),
    path("healthz", healthz),
]


@pytest.fixture
def handler() -> Iterator[RequestHandler]:
    global calls
    calls = Calls()
    with override_settings(
        ROOT_URLCONF=__name__,
        WEB_REQUEST_THREADS=2,
        MIDDLEWARE=[*settings.MIDDLEWARE, f"{__name__}.record_thread"],
    ):
        yield RequestHandler()
    calls.gate.set()


async def get(
    handler: RequestHandler, where: str, timeout: float = 5.0, token: str | None = None
) -> dict[str, Any]:
    """The response, once the handler has finished with the request (its body file closed)."""
    headers = [(b"host", b"localhost")]
    if token:
        headers.append((b"authorization", f"Bearer {token}".encode()))
    request = HttpCommunicator(handler, "GET", where, headers=headers)
    response = await request.get_response(timeout=timeout)
    await request.wait(timeout=timeout)
    return response


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    for _ in range(int(timeout / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("timed out")


async def test_a_request_runs_its_middleware_and_view_on_one_thread_off_the_loop(
    handler: RequestHandler,
) -> None:
    response = await get(handler, "/quick")
    assert response["status"] == 200 and response["body"] == b"quick"
    assert calls.threads["middleware"] == calls.threads["view"]
    assert threading.get_ident() not in calls.threads["view"]


async def test_an_async_view_still_runs_on_the_event_loop(handler: RequestHandler) -> None:
    response = await get(handler, "/async")
    assert response["status"] == 200 and response["body"] == b"async"
    assert calls.threads["async view"] == {threading.get_ident()}
    assert threading.get_ident() not in calls.threads["middleware"]


async def test_at_most_the_configured_requests_run_at_once_and_the_rest_wait_their_turn(
    handler: RequestHandler,
) -> None:
    replies = [asyncio.ensure_future(get(handler, "/slow", timeout=10)) for _ in range(5)]
    await until(lambda: calls.running == 2)
    await asyncio.sleep(0.2)  # time for a third to start, if it could
    assert calls.running == 2 and not any(reply.done() for reply in replies)
    calls.gate.set()
    answered = await asyncio.gather(*replies)
    assert [a["status"] for a in answered] == [200] * 5
    assert calls.most_running == 2


async def test_callers_take_turns_so_one_callers_burst_does_not_hold_up_the_others(
    handler: RequestHandler,
) -> None:
    with override_settings(WEB_REQUEST_THREADS=1):
        one = RequestHandler()  # one at a time: the order served is the order of turns
    busy = asyncio.ensure_future(get(one, "/slow", timeout=10, token="a"))
    await until(lambda: calls.running == 1)
    slots = one._slots_of_this_loop()

    def waiting() -> int:
        return sum(len(turns) for turns in slots.waiting.values())

    burst = []
    for queued, token in enumerate(["a", "a", "a", "b"], start=1):
        burst.append(asyncio.ensure_future(get(one, "/whose", timeout=10, token=token)))
        await until(lambda queued=queued: waiting() == queued)  # type: ignore[misc]
    calls.gate.set()
    await asyncio.gather(busy, *burst)
    # In one line b would come last; taking turns, it comes right after a's first.
    assert calls.served == ["Bearer a", "Bearer b", "Bearer a", "Bearer a"]
    assert slots.free == 1 and not slots.waiting


async def test_a_request_given_up_while_waiting_gives_its_turn_back(
    handler: RequestHandler,
) -> None:
    busy = [asyncio.ensure_future(get(handler, "/slow", timeout=10)) for _ in range(2)]
    await until(lambda: calls.running == 2)
    slots = handler._slots_of_this_loop()
    waiter = asyncio.ensure_future(slots.slot("someone").__aenter__())
    await until(lambda: bool(slots.waiting))
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert not slots.waiting
    calls.gate.set()
    await asyncio.gather(*busy)
    assert slots.free == 2


async def test_a_probe_is_answered_while_every_thread_is_busy(handler: RequestHandler) -> None:
    busy = [asyncio.ensure_future(get(handler, "/slow", timeout=10)) for _ in range(3)]
    await until(lambda: calls.running == 2)
    probe = await get(handler, "/healthz", timeout=2)
    assert probe["status"] == 200
    assert not any(reply.done() for reply in busy)
    calls.gate.set()
    await asyncio.gather(*busy)


@pytest.mark.parametrize("value", ["0", "two"])
def test_a_thread_count_that_cannot_work_is_refused_at_start(value: str) -> None:
    result = run("import django; django.setup()", GPUSCHED_WEB_REQUEST_THREADS=value)
    assert result.returncode != 0
    assert (
        f"GPUSCHED_WEB_REQUEST_THREADS must be a whole number >= 1, not {value!r}" in result.stderr
    )
