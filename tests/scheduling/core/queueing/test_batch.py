"""Gangs in a batch: all or nothing, never a partial hold across cycles, no deadlock between two
gangs that each need more than half of the cluster; and why pods wait."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.queueing.admission import (
    NO_FIT,
    TOPOLOGY_PLACEMENT_FAILED,
    WAITING_FOR_GANG,
)
from scheduling.core.queueing.batch import NominatedPod, classify, gang_order, schedule_batch
from scheduling.core.scheduler import Decision
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import GangRef, Placement, PodRequest, ServiceClass
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework


def cluster(nodes: int = 2) -> ClusterSnapshot:
    return ClusterSnapshot([make_node(f"n{k}").topology("dgx-h100").build() for k in range(nodes)])


def gang(name: str, pods: int, gpus: int, min_count: int | None = None) -> list[PodRequest]:
    ref = GangRef(name, pods if min_count is None else min_count)
    return [replace(make_pod(f"{name}-{k}").gpus(gpus).build(), gang=ref) for k in range(pods)]


def fill(snapshot: ClusterSnapshot, pod: PodRequest, node: str, gpus: range) -> None:
    """`pod` held on whole GPUs of `node`, its CPU on their NUMA nodes."""
    topology = snapshot.chooser(snapshot.index[node]).topology
    cpu = [0] * snapshot.max_numa
    for g in gpus:
        cpu[topology.gpu_numa[g]] += pod.cpu_milli // len(gpus)
    snapshot.assume(pod, Placement(node, tuple(gpus), 1000, numa_cpu_milli=tuple(cpu)))


def gang_of(decision: Decision) -> str:
    assert decision.pod.gang is not None
    return decision.pod.gang.name


def free_gpus(snapshot: ClusterSnapshot) -> int:
    return int(snapshot.full_free_count.sum())


def test_a_gang_that_fits_is_placed_whole_and_bound_together() -> None:
    snapshot = cluster()
    outcome = schedule_batch(framework(), snapshot, gang("job", 2, 8))
    assert [len(g) for g in outcome.gangs] == [2] and not outcome.failed
    assert all(d.status.is_success for d in outcome.gangs[0])
    assert free_gpus(snapshot) == 0


def test_a_gang_that_does_not_fit_holds_nothing() -> None:
    snapshot = cluster()
    outcome = schedule_batch(framework(), snapshot, gang("job", 3, 8))
    assert not outcome.gangs and len(outcome.failed) == 3
    assert free_gpus(snapshot) == 16 and len(snapshot.pods) == 0
    reasons = {classify(d)[0] for d in outcome.failed}
    assert reasons <= {WAITING_FOR_GANG, NO_FIT}
    assert any(WAITING_FOR_GANG in d.summary() for d in outcome.failed)


def test_two_gangs_each_needing_more_than_half_never_deadlock() -> None:
    """Their members arrive interleaved; one gang runs whole, the other holds nothing and runs
    once the first finishes."""
    snapshot = cluster()
    a, b = gang("a", 3, 4), gang("b", 3, 4)  # 12 of 16 GPUs each
    interleaved = [p for pair in zip(a, b, strict=True) for p in pair]
    fw = framework()
    first = schedule_batch(fw, snapshot, interleaved)
    assert [[gang_of(d) for d in g] for g in first.gangs] == [["a", "a", "a"]]
    assert {d.pod.uid for d in first.failed} == {p.uid for p in b}
    assert free_gpus(snapshot) == 4  # b holds nothing
    for decision in first.gangs[0]:  # a finishes
        fw.forget(decision, snapshot)
    second = schedule_batch(fw, snapshot, b)
    assert [[gang_of(d) for d in g] for g in second.gangs] == [["b", "b", "b"]]


def test_min_count_below_count_places_the_quorum_and_the_rest_wait_alone() -> None:
    snapshot = cluster(1)
    outcome = schedule_batch(framework(), snapshot, gang("job", 4, 3, min_count=2))
    assert [len(g) for g in outcome.gangs] == [2]
    assert len(outcome.failed) == 2 and free_gpus(snapshot) == 2


def test_members_bound_earlier_count_towards_the_quorum() -> None:
    snapshot = cluster(1)
    members = gang("job", 3, 2)
    snapshot.assume(members[0], Placement("n0", (0, 1), 1000, numa_cpu_milli=(1000, 0)))
    outcome = schedule_batch(framework(), snapshot, members[1:])
    assert [len(g) for g in outcome.gangs] == [2]


def test_gang_members_are_tried_together_at_their_first_members_place() -> None:
    a, b = gang("a", 2, 1), gang("b", 2, 1)
    single = make_pod("single").build()
    order = gang_order([a[0], single, b[0], a[1], b[1]])
    assert [p.uid for p in order] == ["a-0", "a-1", "single", "b-0", "b-1"]


def test_a_hopeless_gang_stops_early() -> None:
    snapshot = cluster(1)
    calls = 0
    fw = framework()
    original = fw.schedule_one

    def counting(pod, snap):
        nonlocal calls
        calls += 1
        return original(pod, snap)

    fw.schedule_one = counting  # type: ignore[method-assign]
    schedule_batch(fw, snapshot, gang("job", 6, 4))
    assert calls == 3  # two fit, the third fails: the other three could not make six


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 4), st.sampled_from([1, 2, 4, 8]), st.integers(0, 3)),
        min_size=1,
        max_size=6,
    ),
    st.integers(1, 3),
)
def test_no_gang_is_ever_partially_placed(gangs, nodes) -> None:
    snapshot = cluster(nodes)
    pods = []
    for k, (count, gpus, slack) in enumerate(gangs):
        pods += gang(f"g{k}", count, gpus, min_count=max(1, count - slack))
    outcome = schedule_batch(framework(), snapshot, pods)
    placed: dict[str, int] = {}
    for group in outcome.gangs:
        for decision in group:
            placed[gang_of(decision)] = placed.get(gang_of(decision), 0) + 1
    for k, (count, _, slack) in enumerate(gangs):
        assert placed.get(f"g{k}", 0) in (0, *range(max(1, count - slack), count + 1))
    assert len(snapshot.pods) == outcome.placed_pods
    assert outcome.placed_pods + len(outcome.failed) == len(pods)


def test_reasons_tell_topology_from_capacity() -> None:
    snapshot = cluster(1)
    # Free: GPUs 2, 3 (NUMA 0) and 4, 5 (NUMA 1): four free GPUs, no four in one NUMA node.
    for g in (0, 1):
        snapshot.assume(
            make_pod(f"x{g}").gpus(1).build(), Placement("n0", (g,), 1000, (), (1000, 0))
        )
    for g in (6, 7):
        snapshot.assume(
            make_pod(f"x{g}").gpus(1).build(), Placement("n0", (g,), 1000, (), (0, 1000))
        )
    fw = framework()
    aligned = fw.schedule_one(make_pod("p").gpus(4).policy("single-numa-node").build(), snapshot)
    code, message = classify(aligned)
    assert code == TOPOLOGY_PLACEMENT_FAILED and message.startswith(TOPOLOGY_PLACEMENT_FAILED)
    too_big = fw.schedule_one(make_pod("q").gpus(6).build(), snapshot)
    code, message = classify(too_big)
    assert code == NO_FIT
    assert message == "NoFit: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def test_a_preemptor_whose_victims_are_gone_takes_its_nominated_node_first() -> None:
    # n0 was emptied for `preemptor`; `other`, ahead of it in the batch and of the same
    # priority, would take n0 (the only free node) and make it preempt again elsewhere.
    snapshot = cluster()
    fill(snapshot, make_pod("filler").gpus(8).build(), "n1", range(8))
    other = make_pod("other").gpus(8).priority(100).build()
    preemptor = replace(make_pod("preemptor").gpus(8).priority(100).build(), nominated_node="n0")
    outcome = schedule_batch(
        framework(), snapshot, [other, preemptor], evictions_free_at_once=False
    )
    assert [(d.pod.uid, d.node) for d in outcome.placed] == [("preemptor", "n0")]
    assert [d.pod.uid for d in outcome.failed] == ["other"]
    assert not snapshot.reservation_blocked.any()  # nothing of the first pass outlives it


def test_a_node_emptied_for_a_preemptor_is_held_from_pods_of_no_higher_priority() -> None:
    # n0: a victim still terminating on GPUs 0-3, GPUs 4-7 free; n1 full. The preemptor waits
    # for n0; a pod of its priority may not take n0's free GPUs, a higher one may.
    snapshot = cluster()
    victim = make_pod("victim").gpus(4).build()
    fill(snapshot, victim, "n0", range(4))
    fill(snapshot, make_pod("filler").gpus(8).build(), "n1", range(8))
    snapshot.pods.set_unevictable(
        terminating=frozenset({"victim"}), protected=snapshot.pods.protected
    )
    same = make_pod("same").gpus(2).priority(100).build()
    higher = make_pod("higher").gpus(2).priority(200).build()
    preemptor = replace(make_pod("preemptor").gpus(8).priority(100).build(), nominated_node="n0")
    outcome = schedule_batch(
        framework(), snapshot, [same, higher, preemptor], evictions_free_at_once=False
    )
    assert [(d.pod.uid, d.node) for d in outcome.placed] == [("higher", "n0")]
    assert {d.pod.uid for d in outcome.failed} == {"same", "preemptor"}
    (same_failed,) = [d for d in outcome.failed if d.pod.uid == "same"]
    assert "reserved for a waiting gang, large pod or preemptor" in same_failed.summary()


def test_a_node_emptied_for_a_preemptor_not_in_the_batch_is_held_all_the_same() -> None:
    # The same n0, and the preemptor sits this batch out (its backoff): its nomination, told
    # to the batch, keeps lower-priority pods off n0 (issue 37 item 2); a higher one may go.
    snapshot = cluster()
    fill(snapshot, make_pod("victim").gpus(4).build(), "n0", range(4))
    fill(snapshot, make_pod("filler").gpus(8).build(), "n1", range(8))
    snapshot.pods.set_unevictable(
        terminating=frozenset({"victim"}), protected=snapshot.pods.protected
    )
    sweep = replace(make_pod("sweep").gpus(1).build(), service_class=ServiceClass.OPPORTUNISTIC)
    higher = make_pod("higher").gpus(2).priority(200).build()
    outcome = schedule_batch(
        framework(),
        snapshot,
        [sweep, higher],
        evictions_free_at_once=False,
        nominated=[NominatedPod("preemptor", "n0", 100)],
    )
    assert [(d.pod.uid, d.node) for d in outcome.placed] == [("higher", "n0")]
    assert [d.pod.uid for d in outcome.failed] == ["sweep"]


def lending_gpu() -> tuple[ClusterSnapshot, PodRequest]:
    """One shared GPU: a batch owner holds 500 milli and lends 300 of them, idle, to `sweep`."""
    snapshot = ClusterSnapshot([make_node("n0").gpus(1).build()])
    owner = make_pod("owner").share(500).build()
    snapshot.assume(owner, Placement("n0", (0,), 500, numa_cpu_milli=(1000,)))
    snapshot.refresh_reclaimable(np.array([[500]]))
    sweep = replace(make_pod("sweep").share(300).build(), service_class=ServiceClass.OPPORTUNISTIC)
    snapshot.assume(sweep, Placement("n0", (0,), 300, numa_cpu_milli=(1000,), reclaimed=True))
    return snapshot, sweep


def online(uid: str, milli: int, **fields: Any) -> PodRequest:
    pod = make_pod(uid).share(milli).priority(200).build()
    return replace(pod, service_class=ServiceClass.ONLINE, **fields)


def test_an_online_pod_placed_beside_lent_pods_gets_its_gpu_to_itself_at_once() -> None:
    snapshot, sweep = lending_gpu()
    late = replace(make_pod("late").share(200).build(), service_class=ServiceClass.OPPORTUNISTIC)

    outcome = schedule_batch(framework(), snapshot, [online("web", 400), late])

    assert [(d.pod.uid, d.node) for d in outcome.placed] == [("web", "n0")]
    (eviction,) = outcome.evictions
    assert [v.pod.uid for v in eviction.victims] == [sweep.uid]
    assert eviction.reason == "Reclaimed: GPU n0/gpu0: an online pod now holds the GPU"
    assert eviction.preemptor is not None and eviction.preemptor.uid == "web"
    # Nothing is lent beside it any more, not even to a pod later in the same batch.
    assert int(snapshot.gpu_lent[0, 0]) == 0 and int(snapshot.gpu_reclaimable[0, 0]) == 0
    assert [d.pod.uid for d in outcome.failed] == ["late"]


def test_where_evictions_take_a_grace_period_the_online_pod_waits_for_the_lent_pods() -> None:
    snapshot, sweep = lending_gpu()

    first = schedule_batch(
        framework(), snapshot, [online("web", 400)], evictions_free_at_once=False
    )

    assert not first.placed
    (waiting,) = first.failed
    assert waiting.summary() == (
        "Reclaiming: waiting for 1 lent pod(s) on GPU n0/gpu0 to terminate"
    )
    assert first.nominated == {"web": "n0"}
    assert [v.pod.uid for v in first.evictions[0].victims] == [sweep.uid]
    assert sweep.uid in snapshot.pods.terminating and "web" not in snapshot.pods

    # Still terminating: no second eviction, still waiting.
    again = schedule_batch(
        framework(),
        snapshot,
        [online("web", 400, nominated_node="n0")],
        evictions_free_at_once=False,
    )
    assert not again.placed and not again.evictions and again.nominated == {"web": "n0"}

    # Gone: placed on its nominated node.
    snapshot.forget(sweep, snapshot.pods.held[sweep.uid].placement)
    done = schedule_batch(
        framework(),
        snapshot,
        [online("web", 400, nominated_node="n0")],
        evictions_free_at_once=False,
    )
    assert [(d.pod.uid, d.node) for d in done.placed] == [("web", "n0")]
