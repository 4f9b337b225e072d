from dataclasses import replace

import numpy as np

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
    lendable = np.zeros_like(snapshot.gpu_reclaimable)
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
    lendable = np.zeros_like(snapshot.gpu_reclaimable)
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
