"""The tailer's cadence: a read after a push comes one coalescing window after the previous read
began, never a whole window after a step that already took longer; and a read never waits for
the sockets of the step before, while its deltas follow theirs."""

from __future__ import annotations

import asyncio
from typing import Any

from dashboard.live import ClusterView
from dashboard.tailer import Live, Tailer
from scheduling.events import NodeChanged

WINDOW_S = 0.25
LATE_S = 0.15  # how late a wake-up may be on a busy machine


async def step_starts(step_s: float, pushed: bool, count: int = 4) -> list[float]:
    """When `count` steps of `step_s` seconds each began, run by the tailer's own loop."""
    loop = asyncio.get_running_loop()
    tailer = Tailer()
    tailer.coalesce_s = WINDOW_S
    tailer.poll_s = 0.01
    starts: list[float] = []

    async def step() -> tuple[bool, bool]:
        starts.append(loop.time())
        await asyncio.sleep(step_s)
        return pushed, False

    tailer.step = step  # type: ignore[method-assign]
    running = loop.create_task(tailer._run())
    while len(starts) < count:
        await asyncio.sleep(0.01)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    return starts


def gaps(starts: list[float]) -> list[float]:
    return [later - earlier for earlier, later in zip(starts, starts[1:], strict=False)]


async def test_a_short_step_that_pushed_waits_out_the_window_from_its_read() -> None:
    for gap in gaps(await step_starts(0.02, pushed=True)):
        assert WINDOW_S <= gap < WINDOW_S + LATE_S


async def test_a_step_longer_than_the_window_is_followed_at_once() -> None:
    for gap in gaps(await step_starts(0.3, pushed=True)):
        assert 0.3 <= gap < 0.3 + LATE_S  # not 0.3 + the window


async def test_a_step_with_nothing_to_push_polls_again_soon() -> None:
    for gap in gaps(await step_starts(0.02, pushed=False)):
        assert gap < WINDOW_S


class HeldSocket:
    """A socket whose writes wait until it is let go."""

    def __init__(self) -> None:
        self.let_go = asyncio.Event()
        self.received: list[int] = []

    async def deliver(self, message: dict[str, Any]) -> None:
        await self.let_go.wait()
        self.received.append(message["to"])


async def test_a_read_does_not_wait_for_the_sockets_of_the_step_before() -> None:
    tailer = Tailer()
    live = Live(view=ClusterView(), epoch="e", cursor=0, state={"nodes": {}})
    socket = HeldSocket()
    live.subscribers.add(socket)
    tailer.lives[live.view.key] = live
    reads: list[int] = []

    def read_updates(lives: list[Live]) -> tuple[bool, list[Any]]:
        event_id = len(reads) + 1
        reads.append(event_id)
        event = NodeChanged(node="n", cordoned=event_id % 2 == 1, gpus=8)
        changes = {"nodes": {"set": {"n": {"cordoned": event.cordoned}}}}
        return False, [(live, [(event_id, event)], changes)]

    tailer._read_updates = read_updates  # type: ignore[method-assign]
    try:
        assert await asyncio.wait_for(tailer.step(), timeout=5) == (True, False)
        second = asyncio.get_running_loop().create_task(tailer.step())
        for _ in range(200):
            if len(reads) == 2:
                break
            await asyncio.sleep(0.01)
        assert len(reads) == 2 and socket.received == []  # read while the first delta waits
        assert not second.done()  # its own delta waits for the first to be out
        socket.let_go.set()
        await second
        await tailer._delivered()
        assert socket.received == [1, 2]
    finally:
        await tailer.stop()
