from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.reclaim import (
    GpuLending,
    LentPod,
    ReclaimTracker,
    lendable_milli,
    owner_use,
)
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest, ServiceClass
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework


def full_node_with_idle_capacity() -> ClusterSnapshot:
    """Both GPUs allocated whole; GPU 1's owner idles, so 600 milli of it may be lent."""
    snapshot = ClusterSnapshot([make_node("n0").gpus(2).build()])
    fw = framework()
    for k in range(2):
        fw.schedule_one(make_pod(f"owner{k}").gpus(1).build(), snapshot)
    lendable = np.zeros_like(snapshot.gpu_lendable)
    lendable[0, 1] = 600
    snapshot.refresh_reclaimable(lendable)
    return snapshot


def share(uid: str, milli: int, service: ServiceClass) -> PodRequest:
    return replace(make_pod(uid).share(milli).build(), service_class=service)


def test_opportunistic_share_borrows_idle_capacity() -> None:
    snapshot = full_node_with_idle_capacity()
    decision = framework().schedule_one(share("o", 500, ServiceClass.OPPORTUNISTIC), snapshot)
    assert decision.placement is not None
    assert decision.placement.reclaimed and decision.placement.gpu_indices == (1,)
    assert snapshot.gpu_free[0, :2].tolist() == [0, 0]
    assert snapshot.gpu_reclaimable[0, 1] == 100
    assert (
        framework().schedule_one(share("o2", 200, ServiceClass.OPPORTUNISTIC), snapshot).placement
        is None
    )


def test_online_and_batch_pods_never_use_reclaimed_capacity() -> None:
    for service in (ServiceClass.ONLINE, ServiceClass.BATCH):
        snapshot = full_node_with_idle_capacity()
        decision = framework().schedule_one(share("p", 100, service), snapshot)
        assert decision.placement is None
        assert "Insufficient gpusched.io/gpu-milli" in decision.summary()


def test_free_capacity_is_left_for_paying_tenants() -> None:
    snapshot = ClusterSnapshot([make_node("n0").gpus(2).build()])
    framework().schedule_one(make_pod("owner").gpus(1).build(), snapshot)
    lendable = np.zeros_like(snapshot.gpu_lendable)
    lendable[0, 0] = 800
    snapshot.refresh_reclaimable(lendable)
    decision = framework().schedule_one(share("o", 300, ServiceClass.OPPORTUNISTIC), snapshot)
    assert decision.placement is not None and decision.placement.reclaimed
    assert snapshot.gpu_free[0, 1] == 1000  # the free GPU stays whole


def test_forgetting_a_borrowed_share_gives_it_back() -> None:
    snapshot = full_node_with_idle_capacity()
    fw = framework()
    decision = fw.schedule_one(share("o", 500, ServiceClass.OPPORTUNISTIC), snapshot)
    fw.forget(decision, snapshot)
    assert snapshot.gpu_reclaimable[0, 1] == 600


# --- what may be lent, and when it is taken back (scheduling.core.reclaim) ---------------------


def lent(uid: str, milli: int, bound_s: float = 0.0, load: float | None = None) -> LentPod:
    return LentPod(uid, milli, milli / 1000 if load is None else load, bound_s)


def test_owners_lend_what_they_hold_beyond_their_p95_with_a_margin() -> None:
    gpu = GpuLending(owner_milli=1000, online=False, owner_used=0.25)
    assert lendable_milli(gpu, margin=0.2) == 700  # 1000 - 250 x 1.2


def test_nothing_is_lent_by_a_gpu_an_online_pod_holds_or_before_owners_are_measured() -> None:
    assert lendable_milli(GpuLending(owner_milli=500, online=True, owner_used=0.0)) == 0
    assert lendable_milli(GpuLending(owner_milli=1000, online=False, owner_used=None)) == 0


def test_owner_use_excludes_what_lent_pods_are_expected_to_use() -> None:
    # DCGM sees the whole time-sliced GPU: 0.7 busy, of which the lent pod should do 0.45.
    assert owner_use(0.7, (lent("o", 500, load=0.45),), alone_p95=None) == pytest.approx(0.25)
    # Never idler than the owners were measured alone: lending must not talk the owners down.
    assert owner_use(0.5, (lent("o", 500),), alone_p95=0.2) == pytest.approx(0.2)
    assert owner_use(None, (), alone_p95=0.3) == 0.3


def test_an_over_lent_gpu_keeps_its_lent_pods_for_the_grace_period() -> None:
    tracker = ReclaimTracker(grace_s=120, margin=0.0)
    busy = GpuLending(owner_milli=1000, online=False, owner_used=0.8, lent=(lent("o", 500),))
    assert tracker.victims({("n0", 0): busy}, now_s=1000) == []
    assert tracker.victims({("n0", 0): busy}, now_s=1119) == []
    [reclaim] = tracker.victims({("n0", 0): busy}, now_s=1120)
    assert reclaim.pod.uid == "o" and reclaim.gpu_name == "n0/gpu0"
    assert "200 milli may be lent, 500 are" in reclaim.reason


def test_a_burst_shorter_than_the_grace_costs_nobody_anything() -> None:
    tracker = ReclaimTracker(grace_s=120, margin=0.0)
    pods = (lent("o", 500),)
    burst = GpuLending(owner_milli=1000, online=False, owner_used=0.9, lent=pods)
    calm = GpuLending(owner_milli=1000, online=False, owner_used=0.1, lent=pods)
    assert tracker.victims({("n0", 0): burst}, now_s=0) == []
    assert tracker.victims({("n0", 0): calm}, now_s=60) == []
    assert tracker.victims({("n0", 0): burst}, now_s=150) == []  # the clock starts again


def test_the_newest_lent_pods_go_first_and_only_as_many_as_needed() -> None:
    tracker = ReclaimTracker(grace_s=0, margin=0.0)
    pods = (lent("old", 300, bound_s=1), lent("mid", 200, bound_s=2), lent("new", 200, bound_s=3))
    gpu = GpuLending(owner_milli=1000, online=False, owner_used=0.6, lent=pods)  # 400 lendable
    assert [r.pod.uid for r in tracker.victims({("n0", 0): gpu}, now_s=0)] == ["new", "mid"]


def test_lent_pods_leave_at_once_when_an_online_pod_holds_the_gpu() -> None:
    tracker = ReclaimTracker(grace_s=600)
    gpu = GpuLending(owner_milli=500, online=True, owner_used=0.0, lent=(lent("o", 300),))
    [reclaim] = tracker.victims({("n0", 0): gpu}, now_s=0)
    assert "online" in reclaim.reason


def test_a_rebuilt_snapshot_takes_back_every_lent_share_whatever_is_lendable_now() -> None:
    snapshot = full_node_with_idle_capacity()
    decision = framework().schedule_one(share("o", 500, ServiceClass.OPPORTUNISTIC), snapshot)
    assert decision.placement is not None
    rebuilt = ClusterSnapshot([make_node("n0").gpus(2).build()])
    for k in range(2):
        held = snapshot.pods.held[f"owner{k}"]
        rebuilt.assume(held.pod, held.placement)
    rebuilt.assume(decision.pod, decision.placement)  # nothing lendable in the new snapshot
    assert rebuilt.gpu_lent[0, 1] == 500 and rebuilt.gpu_reclaimable[0, 1] == 0
    assert rebuilt.gpu_free[0, :2].tolist() == [0, 0]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from([100, 250, 500]), st.integers(0, 1000)), min_size=1, max_size=12
    )
)
def test_lending_never_takes_more_than_lendable_nor_touches_owners_capacity(
    steps: list[tuple[int, int]],
) -> None:
    snapshot = full_node_with_idle_capacity()
    fw = framework()
    for k, (milli, lendable_now) in enumerate(steps):
        lendable = np.zeros_like(snapshot.gpu_lendable)
        lendable[0, 1] = lendable_now
        snapshot.refresh_reclaimable(lendable)
        before = int(snapshot.gpu_lent[0, 1])
        decision = fw.schedule_one(share(f"o{k}", milli, ServiceClass.OPPORTUNISTIC), snapshot)
        if decision.placement is not None:
            assert decision.placement.reclaimed
            assert before + milli <= lendable_now
        assert snapshot.gpu_free[0, :2].tolist() == [0, 0]
        assert 0 <= snapshot.gpu_lent[0, 1] <= 1000
