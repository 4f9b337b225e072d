"""Estimated start times for a queue, from what is free now and when running work is expected to
end (the simulator's `duration_s`, else a workload's maximum execution time, else unknown).

The queue is served in order without backfilling: each waiting item starts at the first moment
enough of every resource it needs is free, and no earlier than the item before it. An item
whose expected run time is known frees its resources again at start + run time. An item that
cannot start before the known ends run out (or needs more than there will ever be) gets None:
"unknown", never a made-up time.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Running:
    ends_at: float | None  # None: no expected end
    amounts: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Queued:
    key: str
    amounts: Mapping[str, int]
    duration_s: float | None = None


def estimate_starts(
    now: float,
    free: Mapping[str, int],
    running: Sequence[Running],
    queue: Sequence[Queued],
) -> dict[str, float | None]:
    """Per queued key: the estimated start (same clock as `now` and `ends_at`), or None."""
    available = dict(free)
    ends: list[tuple[float, int, Mapping[str, int]]] = []
    counter = 0
    for run in running:
        if run.ends_at is not None:
            ends.append((max(now, run.ends_at), counter, run.amounts))
            counter += 1
    heapq.heapify(ends)
    out: dict[str, float | None] = {}
    clock = now
    blocked = False
    for item in queue:
        if blocked:
            out[item.key] = None
            continue
        while not _enough(available, item.amounts) and ends:
            at, _, amounts = heapq.heappop(ends)
            clock = max(clock, at)
            for resource, amount in amounts.items():
                available[resource] = available.get(resource, 0) + amount
        if not _enough(available, item.amounts):
            out[item.key] = None
            blocked = True  # everything behind it waits for it
            continue
        out[item.key] = clock
        for resource, amount in item.amounts.items():
            available[resource] = available.get(resource, 0) - amount
        if item.duration_s is not None:
            heapq.heappush(ends, (clock + item.duration_s, counter, item.amounts))
            counter += 1
    return out


def _enough(available: Mapping[str, int], amounts: Mapping[str, int]) -> bool:
    return all(available.get(resource, 0) >= amount for resource, amount in amounts.items())
