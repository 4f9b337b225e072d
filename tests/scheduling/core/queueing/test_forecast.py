"""Estimated starts by replaying the queue with the real core: node-aware, not pooled (scattered
free GPUs do not host an 8-GPU pod), cordoned nodes never count, unknown with the reason."""

from __future__ import annotations

from dataclasses import replace

from scheduling.core.queueing.batch import schedule_batch
from scheduling.core.queueing.forecast import (
    BEYOND_HORIZON,
    NO_PREDICTED_END,
    Forecast,
    Queues,
    WaitingWork,
)
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import NodeSpec, Placement, PodRequest
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework
from tests.scheduling.core.queueing.builders import FLAVORS, cq, held, wl

Starts = dict[str, float | str]


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


def test_a_capped_step_keeps_a_queue_of_short_jobs_draining_at_their_pace() -> None:
    """Two 4-GPU slots and a queue of jobs of 50 and 100 s by turns. A geometric grid's far
    steps take in several ends at once and date what starts at the latest of them, so the
    queue drains at its longest jobs' pace and the last estimate is late; capped at 50 s the
    steps fall on every end, as a replay of each end would."""
    fw = framework()
    snapshot = ClusterSnapshot([make_node("n0").topology("dgx-h100").build()])
    waiting = [
        WaitingWork(f"w{k}", tuple(pods(f"w{k}", 1, 4)), None, 50.0 if k % 2 == 0 else 100.0)
        for k in range(12)
    ]

    def starts(growth: float, min_step_s: float = 60.0, max_step_s: float | None = None) -> Starts:
        return Forecast(
            fw,
            snapshot,
            0.0,
            {},
            [],
            waiting,
            growth=growth,
            min_step_s=min_step_s,
            max_step_s=max_step_s,
        ).run()

    every_end = starts(growth=1.0, min_step_s=1.0)
    assert starts(growth=2.0, max_step_s=50.0) == every_end
    assert every_end["w11"] == 400.0
    late = starts(growth=2.0)["w11"]
    assert isinstance(late, float) and late > 400.0


def h100_node() -> NodeSpec:
    """A node of builders.FLAVORS' flavor h100."""
    return make_node("n0").topology("dgx-h100").labels(**{"nvidia.com/gpu.product": "H100"}).build()


def test_the_replay_admits_under_the_cycles_starvation_bound() -> None:
    """Queue a's 8-GPU workload has waited 7 h and finds 4 GPUs free in the cohort. Without the
    bound queue b's 4-GPU workload takes them now. Past the 6-h bound the cycle admits nothing
    else in the cohort while the big one finds no quota (core.queueing.admission), so the replay
    holds the small one back too, until the running pod's end frees the cohort's quota."""
    fw = framework()
    snapshot = ClusterSnapshot([h100_node()])
    (running,) = pods("run", 1, 4)
    schedule_batch(fw, snapshot, [running])
    now = 7 * 3600.0
    waiting = [
        WaitingWork("big", tuple(pods("big", 1, 8)), wl("big", "a", 8, created=0.0), 500.0),
        WaitingWork("small", tuple(pods("small", 1, 4)), wl("small", "b", 4, created=10.0), 500.0),
    ]

    def starts(bound: float | None) -> Starts:
        return Forecast(
            fw,
            snapshot,
            now,
            {running.uid: now + 100.0},
            [held("run", "a", 4)],
            waiting,
            queues=Queues(
                [cq("a", 4, cohort="x"), cq("b", 4, cohort="x")], FLAVORS, starving_after_s=bound
            ),
            owners={running.uid: "run"},
        ).run()

    assert starts(None) == {"small": now, "big": now + 500.0}
    assert starts(6 * 3600.0) == {"small": now + 100.0, "big": now + 600.0}
