"""Topology-aware reclaim for a gang: the fewest evictable pods that free the nodes it needs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from scheduling.core.queueing.batch import Eviction, schedule_batch
from scheduling.core.queueing.gang_reclaim import gang_victims
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import GangRef, Placement, PodRequest
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework


def scattered() -> ClusterSnapshot:
    """Two 8-GPU nodes full of one-GPU pods but for GPUs 0 and 1 of each: 4 free, 2 + 2."""
    snapshot = ClusterSnapshot([make_node(f"n{k}").topology("dgx-h100").build() for k in range(2)])
    for k in range(2):
        for g in range(2, 8):
            pod = make_pod(f"b{k}{g}").gpus(1).build()
            snapshot.assume(pod, Placement(f"n{k}", (g,), 1000, (), (1000, 0)))
    return snapshot


def gang(pods: int, gpus: int) -> list[PodRequest]:
    ref = GangRef("g", pods)
    return [replace(make_pod(f"g{k}").gpus(gpus).build(), gang=ref) for k in range(pods)]


def test_the_fewest_victims_on_one_node_free_a_four_gpu_set() -> None:
    snapshot = scattered()
    fw = framework()
    members = gang(1, 4)
    assert fw.schedule_one(members[0], snapshot).placement is None
    before = snapshot.gpu_free.copy()
    victims = gang_victims(fw, snapshot, members, lambda h: h.pod.uid.startswith("b"))
    assert victims is not None and len(victims) == 2
    assert len({h.node for h in victims}) == 1
    assert np.array_equal(snapshot.gpu_free, before)  # left as it was
    for held in victims:
        snapshot.forget(held.pod, held.placement)
    assert fw.schedule_one(members[0], snapshot).placement is not None


def test_each_member_gets_its_node() -> None:
    snapshot = scattered()
    victims = gang_victims(framework(), snapshot, gang(2, 4), lambda h: True)
    assert victims is not None and len(victims) == 4
    assert {h.node for h in victims} == {0, 1}


def test_nothing_evictable_means_no_reclaim() -> None:
    snapshot = scattered()
    assert gang_victims(framework(), snapshot, gang(1, 4), lambda h: False) is None


def test_schedule_batch_evicts_what_the_hook_chose_and_retries_the_gang() -> None:
    snapshot = scattered()
    fw = framework()
    calls = []

    def reclaim(members) -> Eviction | None:
        calls.append([p.uid for p in members])
        victims = gang_victims(fw, snapshot, members, lambda h: True)
        return Eviction(tuple(victims), "reclaim", members[0]) if victims else None

    outcome = schedule_batch(fw, snapshot, gang(2, 4), reclaim_gang=reclaim)
    assert calls == [["g0", "g1"]]
    assert [len(g) for g in outcome.gangs] == [2] and outcome.preemptions == 1
    (eviction,) = outcome.evictions
    assert all(v.pod.uid not in snapshot.pods for v in eviction.victims)


def test_where_evicted_pods_terminate_first_the_gang_waits_and_the_victims_stay() -> None:
    snapshot = scattered()
    fw = framework()

    def reclaim(members) -> Eviction | None:
        victims = gang_victims(fw, snapshot, members, lambda h: True)
        return Eviction(tuple(victims), "reclaim", members[0]) if victims else None

    outcome = schedule_batch(
        fw, snapshot, gang(2, 4), reclaim_gang=reclaim, evictions_free_at_once=False
    )
    (eviction,) = outcome.evictions
    assert not outcome.gangs and len(outcome.failed) == 2
    assert all(v.pod.uid in snapshot.pods for v in eviction.victims)
    assert all(v.pod.uid in snapshot.pods.terminating for v in eviction.victims)
