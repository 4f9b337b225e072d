from dataclasses import replace

import numpy as np
import pytest

from scheduling.core.load import GpuMeasurement, RecentPlacement, estimated_load
from scheduling.core.plugins.load_aware import NEUTRAL_SCORE, target_load_packing
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import Placement, ServiceClass
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework

FRESH_FOR_S = 60.0  # the shell hands over TELEMETRY_FRESHNESS_SECONDS (default 60)
PROFILE = """
profiles:
- schedulerName: load
  plugins:
    multiPoint:
      enabled: [{name: LoadAware, weight: 5}]
    score:
      disabled: [{name: NodeResourcesFit}]
"""


def cluster(*busy: float, age: float = 5.0) -> ClusterSnapshot:
    """One 2-GPU node per value, each GPU measured at that busy share."""
    snapshot = ClusterSnapshot([make_node(f"n{k}").gpus(2).build() for k in range(len(busy))])
    measured = {(f"n{k}", g): GpuMeasurement(b, age) for k, b in enumerate(busy) for g in range(2)}
    snapshot.refresh_load(*estimated_load(snapshot, measured), FRESH_FOR_S)
    return snapshot


def test_measurement_replaces_the_request_based_estimate_and_recent_pods_are_added() -> None:
    snapshot = ClusterSnapshot([make_node("n0").gpus(2).build(), make_node("n1").gpus(2).build()])
    pod = replace(make_pod("p").gpus(1).build(), load_estimate=0.3)
    snapshot.assume(pod, Placement("n0", (0,), 1000, numa_cpu_milli=(pod.cpu_milli,)))
    assert snapshot.gpu_load[0, 0] == pytest.approx(0.3)  # before any measurement: the estimate
    measured = {("n0", 0): GpuMeasurement(0.1, 10.0), ("n0", 1): GpuMeasurement(0.2, 20.0)}
    load, age = estimated_load(
        snapshot, measured, [RecentPlacement("n0", (1,), expected=0.5, measured=0.1)]
    )
    assert load[0, :2].tolist() == pytest.approx([0.1, 0.2 + 0.5 - 0.1])
    assert age.tolist() == [20.0, np.inf]


def test_assume_and_forget_move_the_load() -> None:
    snapshot = cluster(0.0)
    pod = replace(make_pod("p").share(500).build(), load_estimate=0.2)
    placement = Placement("n0", (1,), 500, numa_cpu_milli=(pod.cpu_milli,))
    snapshot.assume(pod, placement)
    assert snapshot.gpu_load[0, 1] == pytest.approx(0.2)
    snapshot.forget(pod, placement)
    assert snapshot.gpu_load[0, 1] == pytest.approx(0.0)


def test_online_pods_go_where_gpus_are_really_idle() -> None:
    snapshot = cluster(0.9, 0.1)
    pod = replace(
        make_pod("p").gpus(1).build(), service_class=ServiceClass.ONLINE, load_estimate=0.2
    )
    decision = framework(PROFILE).schedule_one(pod, snapshot)
    assert decision.node == "n1"


def test_batch_pods_pack_toward_the_target() -> None:
    snapshot = cluster(0.55, 0.05)
    pod = replace(make_pod("p").gpus(1).build(), load_estimate=0.2)
    decision = framework(PROFILE).schedule_one(pod, snapshot)
    assert decision.node == "n0"


def test_a_burst_spreads_because_each_placement_counts_at_once() -> None:
    snapshot = cluster(0.0, 0.0)
    fw = framework(PROFILE)
    pods = [
        replace(
            make_pod(f"p{k}").share(200).build(),
            service_class=ServiceClass.ONLINE,
            load_estimate=0.2,
        )
        for k in range(4)
    ]
    nodes = [str(fw.schedule_one(pod, snapshot).node) for pod in pods]
    assert sorted(nodes) == ["n0", "n0", "n1", "n1"]


def test_stale_metrics_score_neutral_never_block_and_say_why() -> None:
    snapshot = cluster(0.95, 0.95, age=600.0)
    pod = replace(make_pod("p").gpus(1).build(), service_class=ServiceClass.ONLINE)
    decision = framework(PROFILE).schedule_one(pod, snapshot)
    assert decision.placement is not None
    explained = decision.explain("n0")
    assert explained["scores"]["LoadAware"] == NEUTRAL_SCORE
    assert "stale (600 s old" in explained["notes"]["LoadAware"]


def test_online_share_takes_the_least_loaded_gpu() -> None:
    snapshot = ClusterSnapshot([make_node("n0").gpus(2).build()])
    measured = {("n0", 0): GpuMeasurement(0.8, 1.0), ("n0", 1): GpuMeasurement(0.1, 1.0)}
    snapshot.refresh_load(*estimated_load(snapshot, measured), FRESH_FOR_S)
    pod = replace(make_pod("p").share(300).build(), service_class=ServiceClass.ONLINE)
    decision = framework(PROFILE).schedule_one(pod, snapshot)
    assert decision.placement is not None and decision.placement.gpu_indices == (1,)


@pytest.mark.parametrize(
    ("utilization", "score"),
    [(0.0, 70.0), (35.0, 85.0), (70.0, 100.0), (85.0, 35.0), (100.0, 0.0), (130.0, 0.0)],
)
def test_target_load_packing_shape(utilization: float, score: float) -> None:
    assert target_load_packing(np.array([utilization]), 70.0)[0] == score
