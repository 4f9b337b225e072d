"""DefaultPreemption (PostFilter): online over batch never the reverse, few low-priority recent
victims, the freed capacity fits the pod topology-correctly, and the snapshot is left as it was."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from scheduling.core.plugins.preemption import DefaultPreemption
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import GangRef, Placement, PodRequest, ServiceClass
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework

ONLINE, BATCH, OPPORTUNISTIC = ServiceClass.ONLINE, ServiceClass.BATCH, ServiceClass.OPPORTUNISTIC


def pod(uid, gpus=1, *, priority=0, klass=BATCH, policy=None, gang=None) -> PodRequest:
    builder = make_pod(uid).gpus(gpus).priority(priority)
    if policy:
        builder = builder.policy(policy)
    return replace(builder.build(), service_class=klass, gang=gang)


def hold(snapshot: ClusterSnapshot, request: PodRequest, node: str, *gpus: int) -> None:
    numa = snapshot.chooser(snapshot.index[node]).topology.gpu_numa[gpus[0]]
    cpu = [0] * snapshot.max_numa
    cpu[numa] = request.cpu_milli
    snapshot.assume(request, Placement(node, tuple(gpus), 1000, numa_cpu_milli=tuple(cpu)))


def full_node(klass=BATCH, priorities=(0,) * 8) -> ClusterSnapshot:
    snapshot = ClusterSnapshot([make_node("n0").topology("dgx-h100").build()])
    for g, prio in enumerate(priorities):
        hold(snapshot, pod(f"v{g}", priority=prio, klass=klass), "n0", g)
    return snapshot


def preempt(snapshot, request):
    decision = framework().schedule_one(request, snapshot)
    assert decision.placement is None
    return decision.nomination


def test_online_preempts_batch_the_most_recent_victims() -> None:
    snapshot = full_node()
    nomination = preempt(snapshot, pod("p", 2, klass=ONLINE))
    assert nomination.nominated_node == "n0"
    assert sorted(nomination.victims) == ["v6", "v7"]  # most recently placed


def test_batch_never_preempts_online_even_with_higher_priority() -> None:
    snapshot = full_node(klass=ONLINE)
    assert preempt(snapshot, pod("p", 1, priority=1000)) is None


def test_opportunistic_never_preempts_batch() -> None:
    snapshot = full_node()
    assert preempt(snapshot, pod("p", 1, priority=1000, klass=OPPORTUNISTIC)) is None


def test_whole_gpus_are_freed_by_evicting_the_shares_on_them() -> None:
    # Every GPU holds two opportunistic quarter shares: evicting both on a GPU makes it whole.
    snapshot = ClusterSnapshot([make_node("n0").topology("dgx-h100").build()])
    for g in range(8):
        for k in range(2):
            share = replace(make_pod(f"s{g}-{k}").share(250).build(), service_class=OPPORTUNISTIC)
            numa = snapshot.chooser(0).topology.gpu_numa[g]
            cpu = [0] * snapshot.max_numa
            cpu[numa] = share.cpu_milli
            snapshot.assume(share, Placement("n0", (g,), 250, numa_cpu_milli=tuple(cpu)))
    nomination = preempt(snapshot, pod("p", 2, priority=10))
    assert nomination.nominated_node == "n0"
    assert len(nomination.victims) == 4  # the two shares on each of two GPUs


def test_the_lowest_priority_victims_are_chosen() -> None:
    snapshot = full_node(priorities=(5, 3, 0, 7, 1, 6, 2, 4))
    nomination = preempt(snapshot, pod("p", 2, priority=10))
    assert sorted(nomination.victims) == ["v2", "v4"]  # priorities 0 and 1


def test_equal_priority_is_not_preempted() -> None:
    assert preempt(full_node(), pod("p", 1)) is None


def test_freed_capacity_fits_the_topology_asked_for() -> None:
    # NUMA 0 (GPUs 0-3): 0 and 1 free, 2 and 3 held at priority 5.
    # NUMA 1 (GPUs 4-7): held at priority 1, the lowest.
    # A 4-GPU single-numa-node pod cannot use "the two cheapest" victims; it needs a whole NUMA
    # node: evicting all four priority-1 pods of NUMA 1 (lowest priority) does it.
    snapshot = ClusterSnapshot([make_node("n0").topology("dgx-h100").build()])
    for g in (2, 3):
        hold(snapshot, pod(f"hi{g}", priority=5), "n0", g)
    for g in (4, 5, 6, 7):
        hold(snapshot, pod(f"lo{g}", priority=1), "n0", g)
    request = pod("p", 4, priority=10, policy="single-numa-node")
    nomination = preempt(snapshot, request)
    assert sorted(nomination.victims) == ["lo4", "lo5", "lo6", "lo7"]
    for uid in nomination.victims:
        held = snapshot.pods.held[uid]
        snapshot.forget(held.pod, held.placement)
    decision = framework().schedule_one(request, snapshot)
    assert decision.placement is not None
    assert decision.placement.gpu_indices == (4, 5, 6, 7)


def test_victims_are_minimal_and_sufficient_across_nodes() -> None:
    snapshot = ClusterSnapshot([make_node(f"n{k}").topology("dgx-h100").build() for k in range(3)])
    for k in range(3):
        for g in range(8):
            hold(snapshot, pod(f"n{k}g{g}", priority=k), f"n{k}", g)
    request = pod("p", 3, priority=9)
    nomination = preempt(snapshot, request)
    assert nomination.nominated_node == "n0"  # the lowest-priority victims
    assert len(nomination.victims) == 3
    victims = [snapshot.pods.held[uid] for uid in nomination.victims]
    for held in victims:
        snapshot.forget(held.pod, held.placement)
    fw = framework()
    decision = fw.schedule_one(request, snapshot)
    assert decision.node == "n0"
    fw.forget(decision, snapshot)
    for spared in victims:  # no victim could have been spared
        snapshot.assume(spared.pod, spared.placement)
        again = fw.schedule_one(request, snapshot)
        assert again.placement is None or again.node != "n0"
        fw.forget(again, snapshot)
        snapshot.forget(spared.pod, spared.placement)


def test_the_snapshot_is_left_exactly_as_it_was() -> None:
    snapshot = full_node(priorities=(5, 3, 0, 7, 1, 6, 2, 4))
    columns = ("cpu_free", "memory_free", "numa_cpu_free", "gpu_free", "full_free_mask")
    before = {c: getattr(snapshot, c).copy() for c in columns}
    sequences = {uid: h.sequence for uid, h in snapshot.pods.held.items()}
    preempt(snapshot, pod("p", 4, priority=10, policy="single-numa-node"))
    for c in columns:
        assert np.array_equal(getattr(snapshot, c), before[c]), c
    assert {uid: h.sequence for uid, h in snapshot.pods.held.items()} == sequences


def test_a_gang_victim_takes_its_whole_gang() -> None:
    snapshot = ClusterSnapshot([make_node(f"n{k}").topology("dgx-h100").build() for k in range(2)])
    gang = GangRef("job/main", 2)
    hold(snapshot, pod("g0", 8, gang=gang), "n0", *range(8))
    hold(snapshot, pod("g1", 8, gang=gang), "n1", *range(8))
    nomination = preempt(snapshot, pod("p", 1, klass=ONLINE))
    assert sorted(nomination.victims) == ["g0", "g1"]


def test_nothing_to_do_without_eligible_pods() -> None:
    plugin = DefaultPreemption(100, 10)
    snapshot = full_node(klass=ONLINE)
    decision = framework().schedule_one(pod("p", 1, klass=BATCH), snapshot)
    filters = decision.filters[0][1]
    assert plugin.post_filter(decision.state, decision.pod, snapshot, filters) is None


def lend(snapshot: ClusterSnapshot, request: PodRequest, gpu: int, milli: int) -> None:
    numa = snapshot.chooser(0).topology.gpu_numa[gpu]
    cpu = [0] * snapshot.max_numa
    cpu[numa] = request.cpu_milli
    snapshot.assume(
        request, Placement("n0", (gpu,), milli, numa_cpu_milli=tuple(cpu), reclaimed=True)
    )


def test_a_lent_share_that_would_be_promoted_onto_a_freed_gpu_is_a_victim_too() -> None:
    # Once GPU 0's owner is gone the shell promotes the share lent on it onto the GPU: left in
    # place it would take the GPU the preemptor was given.
    snapshot = full_node(OPPORTUNISTIC)
    lend(snapshot, pod("lent", klass=OPPORTUNISTIC), 0, 250)
    nomination = preempt(snapshot, pod("p", gpus=8, priority=10))
    assert nomination is not None
    assert set(nomination.victims) == {f"v{g}" for g in range(8)} | {"lent"}


def test_a_lent_share_on_a_gpu_that_keeps_its_owner_stays() -> None:
    snapshot = full_node(OPPORTUNISTIC)
    lend(snapshot, pod("lent", klass=OPPORTUNISTIC), 0, 250)
    nomination = preempt(snapshot, pod("p", gpus=4, priority=10))
    assert nomination is not None
    # The most recent owners go (GPUs 4-7); GPU 0 keeps its owner, so its share stays lent.
    assert sorted(nomination.victims) == ["v4", "v5", "v6", "v7"]
