"""The tailer's cadence: a read after a push comes one coalescing window after the previous read
began, never a whole window after a step that already took longer."""

from __future__ import annotations

import asyncio

from dashboard.tailer import Tailer

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
