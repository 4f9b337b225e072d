"""Estimated start times from expected ends, in queue order, never made up."""

from __future__ import annotations

from scheduling.core.queueing.estimate import Queued, Running, estimate_starts


def test_queue_starts_as_running_work_ends() -> None:
    running = [Running(100.0, {"gpu": 4}), Running(50.0, {"gpu": 2}), Running(None, {"gpu": 2})]
    queue = [
        Queued("now", {"gpu": 0}),
        Queued("after-50", {"gpu": 2}, duration_s=30),
        Queued("after-80", {"gpu": 2}),  # the first of the queue ends at 50 + 30
        Queued("after-100", {"gpu": 4}),
        Queued("never", {"gpu": 9}),
        Queued("behind-never", {"gpu": 1}),
    ]
    starts = estimate_starts(0.0, {"gpu": 0}, running, queue)
    assert starts == {
        "now": 0.0,
        "after-50": 50.0,
        "after-80": 80.0,
        "after-100": 100.0,
        "never": None,
        "behind-never": None,
    }


def test_free_capacity_starts_at_once_and_all_resources_must_fit() -> None:
    starts = estimate_starts(
        10.0,
        {"gpu": 2, "cpu": 1},
        [Running(20.0, {"cpu": 4})],
        [Queued("a", {"gpu": 1}), Queued("b", {"gpu": 1, "cpu": 3})],
    )
    assert starts == {"a": 10.0, "b": 20.0}


def test_overdue_ends_count_as_now() -> None:
    starts = estimate_starts(100.0, {}, [Running(40.0, {"gpu": 1})], [Queued("a", {"gpu": 1})])
    assert starts == {"a": 100.0}
