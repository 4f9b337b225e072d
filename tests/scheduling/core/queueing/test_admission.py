"""Admission cycles: ordering, queueing strategies, flavor assignment, reasons and positions."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from scheduling.core.queueing import admission as adm
from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.config import FungibilityPolicy, LocalQueue, QueueingStrategy
from scheduling.core.queueing.ordering import positions, queue_orders
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import QuotaBook
from scheduling.core.queueing.resources import GPU, Demand
from tests.scheduling.core.queueing.builders import FLAVORS, G, cq, held, wl

TRY_NEXT = FungibilityPolicy.TRY_NEXT_FLAVOR


def admitted_keys(result) -> list[str]:
    return [a.workload.key for a in result.admitted]


def test_higher_priority_first_then_fifo() -> None:
    queues = [cq("a", 2)]
    pending = [
        wl("old", "a", 1, created=1),
        wl("urgent", "a", 1, priority=10, created=5),
        wl("older", "a", 1, created=0),
    ]
    result = admission_cycle(queues, FLAVORS, pending, [])
    assert admitted_keys(result) == ["urgent", "older"]
    assert result.waiting["old"].reason == adm.WAITING_FOR_QUOTA


def test_fair_share_across_queues_the_less_borrowing_queue_goes_first() -> None:
    # Cohort of 12 lendable GPUs; a borrows 2 already; 2 GPUs are left for one of the heads.
    queues = [cq("a", 4, cohort="x"), cq("b", 4, cohort="x"), cq("c", 4, cohort="x")]
    admitted = [held("a-run", "a", 6), held("b-run", "b", 4)]
    pending = [wl("a-new", "a", 2, created=0), wl("b-new", "b", 2, created=1)]
    result = admission_cycle(queues, FLAVORS, pending, admitted)
    # DRS after admission: a would borrow 4 of 12 (333), b 2 of 12 (166): b first, though newer.
    assert admitted_keys(result) == ["b-new"]
    assert result.waiting["a-new"].reason == adm.WAITING_FOR_QUOTA


def test_idle_held_gpus_count_against_the_holder_in_the_fair_share() -> None:
    # a and b both borrow 1, 2 GPUs are left; a's 5 GPUs sit 4/5 idle. Kueue's DRS ties the
    # heads (a's is older and goes first); with idle-held capacity counted, b's goes first.
    queues = [cq("a", 4, cohort="x"), cq("b", 4, cohort="x"), cq("c", 4, cohort="x")]
    idle_a = replace(held("a-run", "a", 5), idle=MappingProxyType({("h100", GPU): 4 * G}))
    admitted = [idle_a, held("b-run", "b", 5)]
    pending = [wl("a-new", "a", 2, created=0), wl("b-new", "b", 2, created=1)]
    by_requests = admission_cycle(queues, FLAVORS, pending, admitted)
    assert admitted_keys(by_requests) == ["a-new"]
    by_use = admission_cycle(queues, FLAVORS, pending, admitted, idle_weight=1.0)
    assert admitted_keys(by_use) == ["b-new"]
    assert by_use.waiting["a-new"].reason == adm.WAITING_FOR_QUOTA


def test_priority_beats_fair_share() -> None:
    queues = [cq("a", 4, cohort="x"), cq("b", 4, cohort="x"), cq("c", 4, cohort="x")]
    admitted = [held("a-run", "a", 6), held("b-run", "b", 4)]
    pending = [wl("a-new", "a", 2, priority=5), wl("b-new", "b", 2, created=-1)]
    assert admitted_keys(admission_cycle(queues, FLAVORS, pending, admitted)) == ["a-new"]


def test_weights_scale_fair_share() -> None:
    queues = [
        cq("a", 4, cohort="x", weight=4),
        cq("b", 4, cohort="x"),
        cq("c", 4, cohort="x"),
    ]
    admitted = [held("a-run", "a", 6), held("b-run", "b", 4)]
    pending = [wl("a-new", "a", 2, created=1), wl("b-new", "b", 2, created=0)]
    # a's 333 / 4 = 83 < b's 166.
    assert admitted_keys(admission_cycle(queues, FLAVORS, pending, admitted)) == ["a-new"]


@pytest.mark.parametrize(
    ("strategy", "admitted", "behind_reason"),
    [
        (QueueingStrategy.STRICT_FIFO, [], "StrictFIFO: waiting behind big"),
        (QueueingStrategy.BEST_EFFORT_FIFO, ["small"], None),
    ],
)
def test_strict_fifo_blocks_behind_the_head_best_effort_skips_it(
    strategy, admitted, behind_reason
) -> None:
    queues = [cq("a", 4, strategy=strategy)]
    pending = [wl("big", "a", 3, created=0), wl("small", "a", 1, created=1)]
    result = admission_cycle(queues, FLAVORS, pending, [held("run", "a", 2)])
    assert admitted_keys(result) == admitted
    assert result.waiting["big"].reason == adm.WAITING_FOR_QUOTA
    if behind_reason:
        assert result.waiting["small"].message.startswith(behind_reason)


def test_flavors_are_tried_in_order() -> None:
    queues = [cq("a", {"h100": 4, "a100": 8})]
    result = admission_cycle(queues, FLAVORS, [wl("w", "a", 6)], [])
    assert dict(result.admitted[0].assignment.flavors) == {GPU: "a100"}
    assert result.admitted[0].assignment.node_selector(FLAVORS) == {
        "nvidia.com/gpu.product": "A100"
    }
    first = admission_cycle(queues, FLAVORS, [wl("w", "a", 2)], [])
    assert dict(first.admitted[0].assignment.flavors) == {GPU: "h100"}


def test_when_can_borrow_may_stop_search_borrows_in_the_first_flavor_that_fits() -> None:
    # Kueue's default flavorFungibility: the first flavor that fits, borrowing or not, wins.
    queues = [cq("a", {"h100": 2, "a100": 8}, cohort="x"), cq("b", {"h100": 8}, cohort="x")]
    result = admission_cycle(queues, FLAVORS, [wl("w", "a", 4)], [])
    assert dict(result.admitted[0].assignment.flavors) == {GPU: "h100"}
    assert result.admitted[0].assignment.borrowing


def test_when_can_borrow_try_next_flavor_prefers_a_later_flavor_without_borrowing() -> None:
    queues = [
        cq("a", {"h100": 2, "a100": 8}, cohort="x", when_can_borrow=TRY_NEXT),
        cq("b", {"h100": 8}, cohort="x"),
    ]
    result = admission_cycle(queues, FLAVORS, [wl("w", "a", 4)], [])
    assert dict(result.admitted[0].assignment.flavors) == {GPU: "a100"}
    assert not result.admitted[0].assignment.borrowing
    # When only borrowing works, it borrows.
    full = [held("a-a100", "a", 8, flavor="a100")]
    result = admission_cycle(queues, FLAVORS, [wl("w", "a", 4)], full)
    assert dict(result.admitted[0].assignment.flavors) == {GPU: "h100"}
    assert result.admitted[0].assignment.borrowing


@pytest.mark.parametrize(
    ("workload", "reason", "message"),
    [
        (wl("w", "a", 6, models=frozenset({"H100"})), adm.EXCEEDS_MAX_QUOTA, "maximum capacity 4"),
        (wl("w", "a", 1, models=frozenset({"V100"})), adm.NO_MATCHING_FLAVOR, "matches the pods"),
        (wl("w", "nope", 1), adm.INADMISSIBLE, "ClusterQueue nope does not exist"),
    ],
)
def test_reasons_for_workloads_that_can_never_be_admitted(workload, reason, message) -> None:
    queues = [cq("a", {"h100": 4, "a100": 8})]
    result = admission_cycle(queues, FLAVORS, [workload], [])
    assert not result.admitted
    assert result.waiting["w"].reason == reason
    assert message in result.waiting["w"].message


def test_positions_follow_queue_order() -> None:
    queues = [cq("a", 0), cq("b", 0)]
    pending = [
        wl("a2", "a", 1, created=2),
        wl("a1", "a", 1, created=1),
        wl("a0", "a", 1, priority=1, created=9),
        wl("b1", "b", 1, created=0),
    ]
    result = admission_cycle(queues, FLAVORS, pending, [])
    assert {k: w.position for k, w in result.waiting.items()} == {
        "a0": 1,
        "a1": 2,
        "a2": 3,
        "b1": 1,
    }
    orders = queue_orders(QuotaBook(queues), pending, [], {})
    assert positions(orders) == {"a0": 1, "a1": 2, "a2": 3, "b1": 1}


def test_usage_aware_ordering_between_tenants_of_one_queue() -> None:
    queues = [cq("shared", 5)]
    admitted = [
        held("heavy-run", "shared", 3, local_queue="heavy/q"),
        held("light-run", "shared", 1, local_queue="light/q"),
    ]
    pending = [
        wl("heavy-next", "shared", 1, created=0, local_queue="heavy/q"),
        wl("light-next", "shared", 1, created=1, local_queue="light/q"),
    ]
    result = admission_cycle(queues, FLAVORS, pending, admitted)
    assert admitted_keys(result) == ["light-next"]
    # A weight makes a heavy tenant's share count less: 3/5 / 10 < 1/5.
    weights = [LocalQueue("heavy", "q", "shared", weight=10)]
    result = admission_cycle(queues, FLAVORS, pending, admitted, local_queues=weights)
    assert admitted_keys(result) == ["heavy-next"]


def test_mig_counts_as_gpu_slices_unless_the_queue_covers_the_profile() -> None:
    demand = Demand(mig=MappingProxyType({"3g.40gb": 2}))
    assert demand.amounts() == {GPU: 2 * 429}
    assert demand.amounts({"nvidia.com/mig-3g.40gb"}) == {"nvidia.com/mig-3g.40gb": 2}


def test_a_limit_caps_admissions_and_the_rest_wait() -> None:
    queues = [cq("a", 8)]
    pending = [wl(f"w{k}", "a", 1, created=k) for k in range(4)]
    result = admission_cycle(queues, FLAVORS, pending, [], limit=2)
    assert admitted_keys(result) == ["w0", "w1"]
    assert set(result.waiting) == {"w2", "w3"}


def test_a_low_share_tenant_is_not_starved() -> None:
    """A big tenant floods the cohort and borrows all of a small tenant's idle quota. The small
    tenant's job must start as soon as any running job ends (bounded wait), not after the flood."""
    queues = [cq("big", 6, cohort="x"), cq("small", 2, cohort="x")]
    running: dict[str, tuple[int, AdmittedWorkload]] = {}  # key -> (ends at, admitted)
    pending = [wl(f"big-{k}", "big", 1, created=float(k)) for k in range(40)]
    started_small = None
    for t in range(60):
        if t == 3:
            pending.append(wl("small-0", "small", 1, created=3.0))
        for key in [k for k, (end, _) in running.items() if end <= t]:
            del running[key]
        result = admission_cycle(queues, FLAVORS, pending, [a for _, a in running.values()])
        for admission in result.admitted:
            w = admission.workload
            running[w.key] = (t + 10, held(w.key, w.cluster_queue, 1, admitted=t))
            pending.remove(w)
            if w.key == "small-0":
                started_small = t
        if started_small is not None:
            break
    # The flood took all 8 GPUs at t=0; the first ones end at t=10 and small goes first then.
    assert started_small == 10
