"""Quota preemption: withinClusterQueue, reclaimWithinCohort, borrowWithinCohort, service classes,
and minimal victim sets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.queueing.admission import WAITING_FOR_QUOTA, admission_cycle
from scheduling.core.queueing.config import (
    BorrowWithinCohortPolicy as Borrow,
)
from scheduling.core.queueing.config import (
    ReclaimWithinCohort as Reclaim,
)
from scheduling.core.queueing.config import (
    WithinClusterQueue as Within,
)
from scheduling.core.queueing.preemption import find_victims, may_preempt
from scheduling.core.queueing.quota import QuotaBook
from scheduling.core.queueing.resources import GPU
from scheduling.core.types import ServiceClass
from tests.scheduling.core.queueing.builders import FLAVORS, G, cq, held, wl

ONLINE, BATCH, OPPORTUNISTIC = ServiceClass.ONLINE, ServiceClass.BATCH, ServiceClass.OPPORTUNISTIC


def victims_of(queues, admitted, preemptor):
    result = admission_cycle(queues, FLAVORS, [preemptor], admitted)
    if not result.admitted:
        return None
    return sorted(result.admitted[0].victims)


# (case, queues, admitted, preemptor, expected victims or None)
RULES = [
    (
        "withinClusterQueue LowerPriority: the most recently admitted lower-priority one",
        [cq("a", 4, within=Within.LOWER_PRIORITY)],
        [held("old", "a", 2, admitted=1), held("new", "a", 2, admitted=2)],
        wl("p", "a", 2, priority=10),
        ["new"],
    ),
    (
        "withinClusterQueue Never: no preemption",
        [cq("a", 4)],
        [held("old", "a", 2, admitted=1), held("new", "a", 2, admitted=2)],
        wl("p", "a", 2, priority=10),
        None,
    ),
    (
        "lowest priority first, whatever the age",
        [cq("a", 4, within=Within.LOWER_PRIORITY)],
        [held("p5", "a", 2, priority=5, admitted=9), held("p1", "a", 2, priority=1, admitted=1)],
        wl("p", "a", 2, priority=10),
        ["p1"],
    ),
    (
        "equal priority is not lower",
        [cq("a", 4, within=Within.LOWER_PRIORITY)],
        [held("same", "a", 4, priority=10, created=5)],
        wl("p", "a", 2, priority=10, created=1),
        None,
    ),
    (
        "LowerOrNewerEqualPriority: an equal-priority newer one may go",
        [cq("a", 4, within=Within.LOWER_OR_NEWER_EQUAL_PRIORITY)],
        [held("same", "a", 4, priority=10, created=5)],
        wl("p", "a", 2, priority=10, created=1),
        ["same"],
    ),
    (
        "LowerOrNewerEqualPriority: but not an older one",
        [cq("a", 4, within=Within.LOWER_OR_NEWER_EQUAL_PRIORITY)],
        [held("same", "a", 4, priority=10, created=0)],
        wl("p", "a", 2, priority=10, created=1),
        None,
    ),
    (
        "reclaimWithinCohort: take back lent quota from the borrower",
        [cq("a", 4, cohort="x", reclaim=Reclaim.LOWER_PRIORITY), cq("b", 4, cohort="x")],
        [held("b1", "b", 4, admitted=1), held("b2", "b", 4, admitted=2)],
        wl("p", "a", 4, priority=1),
        ["b2"],
    ),
    (
        "reclaimWithinCohort Never: wait for the borrower",
        [cq("a", 4, cohort="x"), cq("b", 4, cohort="x")],
        [held("b1", "b", 4, admitted=1), held("b2", "b", 4, admitted=2)],
        wl("p", "a", 4, priority=1),
        None,
    ),
    (
        "reclaimWithinCohort LowerPriority spares a higher-priority borrower",
        [cq("a", 4, cohort="x", reclaim=Reclaim.LOWER_PRIORITY), cq("b", 4, cohort="x")],
        [held("b1", "b", 4, priority=5), held("b2", "b", 4, priority=5)],
        wl("p", "a", 4, priority=1),
        None,
    ),
    (
        "reclaimWithinCohort Any reclaims even from a higher-priority borrower",
        [cq("a", 4, cohort="x", reclaim=Reclaim.ANY), cq("b", 4, cohort="x")],
        [held("b1", "b", 4, priority=5, admitted=1), held("b2", "b", 4, priority=5, admitted=2)],
        wl("p", "a", 4, priority=1),
        ["b2"],
    ),
    (
        "reclaim never touches a queue within its own quota",
        [
            cq("a", 4, cohort="x", reclaim=Reclaim.ANY),
            cq("b", 4, cohort="x"),
            cq("c", 4, cohort="x"),
        ],
        [held("b1", "b", 6, admitted=1), held("c1", "c", 4, admitted=9), held("a1", "a", 2)],
        wl("p", "a", 2, priority=1),
        ["b1"],
    ),
    (
        "borrowWithinCohort: preempt a lower-priority borrower to borrow",
        [
            cq("a", 4, cohort="x", borrow_within=Borrow.LOWER_PRIORITY, threshold=10),
            cq("b", 4, cohort="x"),
            cq("c", 4, cohort="x"),
        ],
        [
            held("a1", "a", 4),
            held("b1", "b", 4, admitted=1),
            held("b2", "b", 2, admitted=2),
            held("c1", "c", 2),
        ],
        wl("p", "a", 2, priority=5),
        ["b2"],
    ),
    (
        "borrowWithinCohort: not above maxPriorityThreshold",
        [
            cq("a", 4, cohort="x", borrow_within=Borrow.LOWER_PRIORITY, threshold=-1),
            cq("b", 4, cohort="x"),
            cq("c", 4, cohort="x"),
        ],
        [held("a1", "a", 4), held("b1", "b", 4), held("b2", "b", 2), held("c1", "c", 2)],
        wl("p", "a", 2, priority=5),
        None,
    ),
    (
        "online preempts batch even of higher priority",
        [cq("a", 4, within=Within.LOWER_PRIORITY)],
        [held("batch", "a", 4, priority=100)],
        wl("p", "a", 2, service_class=ONLINE),
        ["batch"],
    ),
    (
        "batch never preempts online, even of lower priority",
        [cq("a", 4, within=Within.LOWER_PRIORITY)],
        [held("online", "a", 4, priority=0, service_class=ONLINE)],
        wl("p", "a", 2, priority=100),
        None,
    ),
    (
        "online prefers opportunistic victims to batch ones of the same priority... by priority",
        [cq("a", 4, within=Within.LOWER_PRIORITY)],
        [
            held("batch", "a", 2, priority=5, admitted=9),
            held("opp", "a", 2, priority=1, service_class=OPPORTUNISTIC, admitted=1),
        ],
        wl("p", "a", 2, service_class=ONLINE, priority=10),
        ["opp"],
    ),
    (
        "minimal: a victim not needed once a bigger one goes is given back",
        [cq("a", 2, within=Within.LOWER_PRIORITY)],
        [held("small", "a", 1, priority=0, admitted=1), held("big", "a", 1, priority=1)],
        wl("p", "a", 1, priority=10),
        ["small"],
    ),
]


@pytest.mark.parametrize(
    ("queues", "admitted", "preemptor", "expected"),
    [case[1:] for case in RULES],
    ids=[case[0] for case in RULES],
)
def test_preemption_rules(queues, admitted, preemptor, expected) -> None:
    assert victims_of(queues, admitted, preemptor) == expected


def test_fill_back_keeps_only_what_is_needed() -> None:
    # Ordered by priority: v1 (1 GPU) then v2 (2 GPUs). Removing v1 is not enough, removing v2
    # is; then v1 is given back, since v2 alone frees the 2 GPUs asked for.
    queues = [cq("a", 3, within=Within.LOWER_PRIORITY)]
    admitted = [held("v1", "a", 1, priority=0), held("v2", "a", 2, priority=1)]
    b = QuotaBook(queues)
    for a in admitted:
        b.charge("a", a.usage)
    before = dict(b.usage["a"])
    victims = find_victims(
        b, wl("p", "a", 2, priority=9).preemptor(), {("h100", GPU): 2 * G}, admitted
    )
    assert victims == ("v2",)
    assert b.usage["a"] == before  # the book is left as it was


def test_no_victims_means_waiting_for_quota() -> None:
    result = admission_cycle([cq("a", 2)], FLAVORS, [wl("p", "a", 2)], [held("x", "a", 2)])
    assert result.waiting["p"].reason == WAITING_FOR_QUOTA


def test_the_class_rule() -> None:
    def rule(p, v, pp=0, vp=0, policy="LowerPriority"):
        return may_preempt(
            preemptor_class=p,
            preemptor_priority=pp,
            preemptor_created=0,
            victim_class=v,
            victim_priority=vp,
            victim_created=0,
            rule=policy,
        )

    assert (
        rule(ONLINE, BATCH, 0, 1000) and rule(ONLINE, OPPORTUNISTIC) and rule(BATCH, OPPORTUNISTIC)
    )
    assert not rule(BATCH, ONLINE, 1000, 0) and not rule(OPPORTUNISTIC, ONLINE, 1000, 0)
    assert not rule(OPPORTUNISTIC, BATCH, 1000, 0, "Any")
    assert not rule(ONLINE, BATCH, policy="Never")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.integers(0, 5), st.sampled_from(list(ServiceClass))),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 4),
    st.integers(0, 5),
    st.sampled_from(list(ServiceClass)),
)
def test_victims_are_eligible_sufficient_and_minimal(holders, ask, priority, klass) -> None:
    queues = [cq("a", 8, within=Within.LOWER_PRIORITY)]
    b = QuotaBook(queues)
    admitted = []
    for k, (gpus, prio, vclass) in enumerate(holders):
        if b.fits("a", {("h100", GPU): gpus * G}) is None:
            w = held(f"v{k}", "a", gpus, priority=prio, admitted=k, service_class=vclass)
            b.charge("a", w.usage)
            admitted.append(w)
    preemptor = wl("p", "a", ask, priority=priority, service_class=klass)
    need = {("h100", GPU): ask * G}
    victims = find_victims(b, preemptor.preemptor(), need, admitted)
    if b.fits("a", need) is None:
        return  # nothing to preempt for
    by_key = {a.key: a for a in admitted}
    if victims is None:
        # Then even every eligible workload together would not make room.
        eligible = [
            a
            for a in admitted
            if may_preempt(
                preemptor_class=klass,
                preemptor_priority=priority,
                preemptor_created=0,
                victim_class=a.service_class,
                victim_priority=a.priority,
                victim_created=a.created_at,
                rule="LowerPriority",
            )
        ]
        for a in eligible:
            b.charge("a", a.usage, -1)
        assert b.fits("a", need) is not None
        return
    for key in victims:
        v = by_key[key]
        assert may_preempt(
            preemptor_class=klass,
            preemptor_priority=priority,
            preemptor_created=0,
            victim_class=v.service_class,
            victim_priority=v.priority,
            victim_created=v.created_at,
            rule="LowerPriority",
        )
        b.charge("a", v.usage, -1)
    assert b.fits("a", need) is None  # after eviction the preemptor fits
    for key in victims:  # and no victim could have been spared
        b.charge("a", by_key[key].usage, 1)
        assert b.fits("a", need) is not None
        b.charge("a", by_key[key].usage, -1)


def test_a_workload_admitted_in_this_cycle_is_never_a_victim_in_it() -> None:
    # x has no quota of its own and borrows y's; its batch job goes first (priority 100). y's
    # online job could reclaim from it by class, but not in the cycle that admitted it: the
    # eviction would find nothing to evict yet, and both would hold the same quota.
    queues = [cq("x", 0, cohort="c"), cq("y", 4, cohort="c", reclaim=Reclaim.ANY)]
    pending = [
        wl("xb", "x", 4, priority=100, created=0),
        wl("yo", "y", 4, service_class=ONLINE, created=1),
    ]
    result = admission_cycle(queues, FLAVORS, pending, [])
    assert [(a.workload.key, a.victims) for a in result.admitted] == [("xb", ())]
    assert result.waiting["yo"].reason == WAITING_FOR_QUOTA
    # In the next cycle it is an ordinary borrower, and reclaimed.
    again = admission_cycle(queues, FLAVORS, [pending[1]], [held("xb", "x", 4, priority=100)])
    assert [(a.workload.key, a.victims) for a in again.admitted] == [("yo", ("xb",))]
