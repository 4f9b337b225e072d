"""Estimated starts by replaying the queue with the real core: node-aware, not pooled (scattered
free GPUs do not host an 8-GPU pod), cordoned nodes never count, unknown with the reason."""

from __future__ import annotations

from dataclasses import replace

from scheduling.core.queueing.batch import schedule_batch
from scheduling.core.queueing.forecast import (
    BEYOND_HORIZON,
    NO_PREDICTED_END,
    Forecast,
    WaitingWork,
)
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import Placement, PodRequest
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework


def pods(prefix: str, count: int, gpus: int) -> list[PodRequest]:
    return [make_pod(f"{prefix}-{k}").gpus(gpus).build() for k in range(count)]


def test_scattered_free_gpus_do_not_make_an_8_gpu_pod_ready() -> None:
    """Two nodes with 4 free GPUs each: 8 free in all, yet the 8-GPU pod waits for the first
    node to empty (at 100), not "now"."""
    fw = framework()
    snapshot = ClusterSnapshot([make_node(f"n{k}").topology("dgx-h100").build() for k in range(2)])
    held = pods("a", 2, 4)
    for pod, node in zip(held, ("n0", "n1"), strict=True):
        snapshot.assume(pod, Placement(node, (0, 1, 2, 3), 1000, numa_cpu_milli=(pod.cpu_milli, 0)))
    ends = {held[0].uid: 100.0, held[1].uid: 300.0}
    big = make_pod("big").gpus(8).build()
    starts = Forecast(fw, snapshot, 0.0, ends, [], [WaitingWork("big", (big,), None, 50.0)]).run()
    assert starts == {"big": 100.0}
    assert len(snapshot.pods) == 2  # the caller's snapshot is untouched


def test_a_cordoned_node_never_counts() -> None:
    fw = framework()
    nodes = [make_node(f"n{k}").topology("dgx-h100").build() for k in range(2)]
    nodes[1] = replace(nodes[1], cordoned=True)
    snapshot = ClusterSnapshot(nodes)
    (held,) = pods("a", 1, 8)
    schedule_batch(fw, snapshot, [held])
    waiting = [WaitingWork("next", tuple(pods("next", 1, 8)), None, 10.0)]
    assert Forecast(fw, snapshot, 0.0, {held.uid: 500.0}, [], waiting).run() == {"next": 500.0}


def test_unknown_with_the_reason() -> None:
    fw = framework()
    snapshot = ClusterSnapshot([make_node("n0").topology("dgx-h100").build()])
    (held,) = pods("a", 1, 8)
    schedule_batch(fw, snapshot, [held])
    waiting = [WaitingWork("next", tuple(pods("next", 1, 8)), None, 10.0)]
    assert Forecast(fw, snapshot, 0.0, {held.uid: None}, [], waiting).run() == {
        "next": NO_PREDICTED_END
    }
    far = Forecast(fw, snapshot, 0.0, {held.uid: 1e7}, [], waiting, horizon_s=3600.0).run()
    assert far == {"next": BEYOND_HORIZON.format(hours=1)}


def test_a_start_is_dated_at_the_end_that_made_room_not_at_the_grid_point() -> None:
    """Two 4-GPU pods end at 100 and 110; the grid's step after 100 is 160. The 8-GPU pod starts
    at 110, when the second end frees the node, and the next one at 110 + its run time: the
    grid's rounding neither delays an estimate nor adds up along a chain of starts."""
    fw = framework()
    snapshot = ClusterSnapshot([make_node("n0").topology("dgx-h100").build()])
    held = pods("a", 2, 4)
    schedule_batch(fw, snapshot, held)
    ends = {held[0].uid: 100.0, held[1].uid: 110.0}
    waiting = [
        WaitingWork("first", tuple(pods("first", 1, 8)), None, 50.0),
        WaitingWork("second", tuple(pods("second", 1, 8)), None, 50.0),
    ]
    starts = Forecast(fw, snapshot, 0.0, ends, [], waiting, min_step_s=60.0).run()
    assert starts == {"first": 110.0, "second": 160.0}
