"""Consolidation: a gang whose reservation cannot complete within its horizon moves movable work
off the fewest nodes, only when every moved pod fits elsewhere; never an online pod."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.queueing.backfill import BackfillPolicy
from scheduling.core.queueing.batch import Eviction, schedule_batch
from scheduling.core.queueing.consolidation import REASON, consolidation_victims, movable
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import GangRef, Placement, PodRequest, ServiceClass
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework

CLASSES = (ServiceClass.ONLINE, ServiceClass.BATCH, ServiceClass.OPPORTUNISTIC)


def cluster(layout: list[list[ServiceClass]]) -> ClusterSnapshot:
    """8-GPU nodes; node k holds one 1-GPU pod per entry of layout[k], of that class."""
    snapshot = ClusterSnapshot(
        [make_node(f"n{k}").topology("dgx-h100").build() for k in range(len(layout))]
    )
    for k, classes in enumerate(layout):
        for g, klass in enumerate(classes):
            pod = replace(make_pod(f"p{k}-{g}").gpus(1).build(), service_class=klass)
            snapshot.assume(pod, Placement(f"n{k}", (g,), 1000, (), (1000, 0)))
    return snapshot


def gang(pods: int, gpus: int = 8, name: str = "big") -> list[PodRequest]:
    ref = GangRef(name, pods)
    return [replace(make_pod(f"{name}{k}").gpus(gpus).build(), gang=ref) for k in range(pods)]


def test_movable_is_never_online_nor_a_gang_member() -> None:
    assert not movable(replace(make_pod("o").gpus(1).build(), service_class=ServiceClass.ONLINE))
    assert movable(make_pod("b").gpus(1).build())
    assert movable(replace(make_pod("x").gpus(1).build(), service_class=ServiceClass.OPPORTUNISTIC))
    assert not movable(replace(make_pod("g").gpus(1).build(), gang=GangRef("g", 2)))


def test_the_work_of_the_emptiest_nodes_moves_to_the_others() -> None:
    # Four nodes: two with 1 pod each, two with 6; a 2 x 8-GPU gang needs two empty nodes.
    batch = ServiceClass.BATCH
    snapshot = cluster([[batch], [batch] * 6, [batch], [batch] * 6])
    fw = framework()
    before = snapshot.gpu_free.copy()
    victims = consolidation_victims(fw, snapshot, gang(2), lambda h: True)
    assert victims is not None
    assert sorted(h.pod.uid for h in victims) == ["p0-0", "p2-0"]  # the fewest moved
    assert np.array_equal(snapshot.gpu_free, before)  # left as it was
    assert len(snapshot.pods) == 14


def test_nothing_moves_when_the_moved_pods_would_have_nowhere_to_go() -> None:
    batch = ServiceClass.BATCH
    snapshot = cluster([[batch] * 4, [batch] * 8])  # the 4 pods cannot go to the full node
    assert consolidation_victims(framework(), snapshot, gang(1), lambda h: True) is None


def test_an_online_pod_pins_its_node() -> None:
    online, batch = ServiceClass.ONLINE, ServiceClass.BATCH
    snapshot = cluster([[online], [batch], [batch] * 4])
    victims = consolidation_victims(framework(), snapshot, gang(1), lambda h: True)
    assert [h.pod.uid for h in victims or []] == ["p1-0"]
    # With the batch pod kept where it is by the caller (its queue's switch), nothing moves.
    assert (
        consolidation_victims(framework(), cluster([[online], [online]]), gang(1), lambda h: True)
        is None
    )


def test_a_gang_waiting_for_terminating_pods_moves_nothing_more() -> None:
    batch = ServiceClass.BATCH
    snapshot = cluster([[batch], [batch] * 4])
    snapshot.pods.set_unevictable(terminating=frozenset({"p0-0"}), protected=frozenset())
    assert consolidation_victims(framework(), snapshot, gang(1), lambda h: True) == []


@settings(max_examples=60, deadline=None)
@given(
    layout=st.lists(
        st.lists(st.sampled_from(CLASSES), min_size=0, max_size=8), min_size=1, max_size=5
    ),
    members=st.integers(min_value=1, max_value=3),
    gpus=st.sampled_from([2, 4, 8]),
    kept=st.sets(st.integers(min_value=0, max_value=39)),
)
def test_a_consolidation_moves_only_movable_allowed_work_that_fits_elsewhere(
    layout: list[list[ServiceClass]], members: int, gpus: int, kept: set[int]
) -> None:
    snapshot = cluster(layout)
    fw = framework()
    uids = sorted(snapshot.pods.held)
    protected = {uids[k] for k in kept if k < len(uids)}  # what the caller keeps in place
    held_before = {uid: h.placement for uid, h in snapshot.pods.held.items()}
    free_before = snapshot.gpu_free.copy()
    pods = gang(members, gpus)
    victims = consolidation_victims(fw, snapshot, pods, lambda h: h.pod.uid not in protected)
    # The snapshot is exactly as it was.
    assert {uid: h.placement for uid, h in snapshot.pods.held.items()} == held_before
    assert np.array_equal(snapshot.gpu_free, free_before)
    if not victims:
        return
    for held in victims:
        assert held.pod.service_class is not ServiceClass.ONLINE  # never an online pod
        assert held.pod.uid not in protected
    # Moving them lets the whole gang in, and every moved pod still fits somewhere else.
    for held in victims:
        snapshot.forget(held.pod, held.placement)
    for pod in pods:
        assert fw.schedule_one(pod, snapshot).placement is not None
    for held in victims:
        assert fw.schedule_one(held.pod, snapshot).placement is not None


def _policy(ends_in_s: float) -> BackfillPolicy:
    """Every pod held ends in `ends_in_s`; reservations may wait an hour."""
    return BackfillPolicy(
        now=0.0, ends_at=lambda held: ends_in_s, runtime_s=lambda pod: None, horizon_s=3600.0
    )


def test_the_batch_consolidates_only_when_the_reservation_cannot_complete() -> None:
    batch = ServiceClass.BATCH
    fw = framework()
    calls: list[str] = []

    def consolidate(members: Sequence[PodRequest]) -> Eviction | None:
        calls.append(members[0].uid)
        victims = consolidation_victims(fw, snapshot, members, lambda h: True)
        return Eviction(tuple(victims), REASON, members[0]) if victims else None

    # What holds the nodes ends within the horizon: the gang reserves and waits.
    snapshot = cluster([[batch], [batch] * 4])
    outcome = schedule_batch(
        fw, snapshot, gang(1), backfill=_policy(1800.0), consolidate_gang=consolidate
    )
    assert calls == [] and len(outcome.reservations) == 1 and not outcome.evictions

    # It ends beyond the horizon: the reservation cannot complete, so the work moves.
    snapshot = cluster([[batch], [batch] * 4])
    outcome = schedule_batch(
        fw, snapshot, gang(1), backfill=_policy(7200.0), consolidate_gang=consolidate
    )
    assert calls == ["big0"]
    assert [len(g) for g in outcome.gangs] == [1]
    (eviction,) = outcome.evictions
    assert eviction.reason == REASON and [v.pod.uid for v in eviction.victims] == ["p0-0"]

    # Without reservations (no horizon to miss), the hook is never asked.
    calls.clear()
    snapshot = cluster([[batch], [batch] * 4])
    outcome = schedule_batch(fw, snapshot, gang(1), consolidate_gang=consolidate)
    assert calls == [] and not outcome.gangs and not outcome.evictions
