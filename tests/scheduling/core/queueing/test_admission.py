"""Admission cycles: ordering, queueing strategies, flavor assignment, reasons and positions."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from scheduling.core.queueing import admission as adm
from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.config import (
    Cohort,
    FlavorQuotas,
    FungibilityPolicy,
    LocalQueue,
    NamespaceSelector,
    QueueingStrategy,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    WithinClusterQueue,
)
from scheduling.core.queueing.ordering import positions, queue_orders
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import QuotaBook
from scheduling.core.queueing.resources import GPU, Demand
from scheduling.core.types import PodRequest, Taint, TaintEffect, Toleration
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


def test_strict_fifo_names_the_head_by_its_label_not_its_internal_key() -> None:
    queues = [cq("a", 4, strategy=QueueingStrategy.STRICT_FIFO)]
    head = replace(wl("734", "a", 3, created=0), label="ml/train-7")
    result = admission_cycle(
        queues, FLAVORS, [head, wl("small", "a", 1, created=1)], [held("run", "a", 2)]
    )
    message = result.waiting["small"].message
    assert message.startswith("StrictFIFO: waiting behind ml/train-7 ") and "734" not in message


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


# --- Kueue compatibility: any resource, trees, priority classes, deactivation, stop policies ---


def credits_queue(credits: int, *, pods: int | None = None):
    """A queue covering GPUs (in flavor h100) and, in a second group, example.com/credits (and
    pods) in flavor h100 too."""
    resources = {"example.com/credits": ResourceQuota(credits)}
    covered: tuple[str, ...] = ("example.com/credits",)
    if pods is not None:
        resources["pods"] = ResourceQuota(pods)
        covered += ("pods",)
    base = cq("shared", 8)
    group = ResourceGroup(covered, (FlavorQuotas("a100", MappingProxyType(resources)),))
    return replace(base, resource_groups=(*base.resource_groups, group))


def extended(key: str, credits: int, *, pods: int = 1, created: float = 0.0):
    pod = PodRequest(uid=key, gpus=1, extended={"example.com/credits": credits})
    return replace(wl(key, "shared", 0, created=created), demand=Demand.of_pods([(pod, pods)]))


def test_an_extended_resource_quota_holds_a_workload_back() -> None:
    queues = [credits_queue(100)]
    result = admission_cycle(
        queues, FLAVORS, [extended("w1", 60, created=0), extended("w2", 60, created=1)], []
    )
    assert [a.workload.key for a in result.admitted] == ["w1"]
    assert result.admitted[0].assignment.usage[("a100", "example.com/credits")] == 60
    waiting = result.waiting["w2"]
    assert waiting.reason == adm.WAITING_FOR_QUOTA
    assert "insufficient unused quota for example.com/credits in flavor a100" in waiting.message
    # GPUs were free: only the credits held it back.
    assert result.admitted[0].assignment.usage[("h100", GPU)] == G


def test_pods_are_counted_as_kueue_counts_them() -> None:
    queues = [credits_queue(1000, pods=3)]
    result = admission_cycle(queues, FLAVORS, [extended("four", 1, pods=4)], [])
    assert result.waiting["four"].reason == adm.EXCEEDS_MAX_QUOTA
    assert "request 4 > maximum capacity 3" in result.waiting["four"].message
    fits = admission_cycle(queues, FLAVORS, [extended("three", 1, pods=3)], [])
    assert fits.admitted[0].assignment.usage[("a100", "pods")] == 3


def test_a_deactivated_workload_is_evicted_and_never_readmitted() -> None:
    queues = [cq("a", 4)]
    admitted = [replace(held("run", "a", 2), active=False)]
    pending = [replace(wl("off", "a", 1), active=False), wl("on", "a", 1)]
    result = admission_cycle(queues, FLAVORS, pending, admitted)
    assert [(e.key, e.reason) for e in result.evictions] == [("run", adm.INACTIVE_WORKLOAD)]
    assert [a.workload.key for a in result.admitted] == ["on"]
    assert result.waiting["off"].reason == adm.INACTIVE_WORKLOAD
    # The evicted workload's quota is free in the same cycle.
    big = admission_cycle(queues, FLAVORS, [wl("big", "a", 4)], admitted)
    assert [a.workload.key for a in big.admitted] == ["big"]


def test_stop_policies_hold_and_drain() -> None:
    hold = replace(cq("held", 4), stop_policy=StopPolicy.HOLD)
    drain = replace(cq("drained", 4), stop_policy=StopPolicy.HOLD_AND_DRAIN)
    admitted = [held("keeps", "held", 1), held("goes", "drained", 1)]
    pending = [wl("w1", "held", 1), wl("w2", "drained", 1)]
    result = admission_cycle([hold, drain], FLAVORS, pending, admitted)
    assert not result.admitted
    assert [(e.key, e.reason) for e in result.evictions] == [("goes", adm.CLUSTER_QUEUE_STOPPED)]
    assert "ClusterQueue held is stopped (Hold)" in result.waiting["w1"].message
    lq = LocalQueue("ns", "drained-lq", "held", stop_policy=StopPolicy.HOLD_AND_DRAIN)
    open_cq = cq("held", 4)
    by_lq = admission_cycle(
        [open_cq],
        FLAVORS,
        [wl("w3", "held", 1, local_queue="ns/drained-lq")],
        [held("lq-run", "held", 1, local_queue="ns/drained-lq")],
        local_queues=[lq],
    )
    assert [(e.key, e.reason) for e in by_lq.evictions] == [("lq-run", adm.LOCAL_QUEUE_STOPPED)]
    assert by_lq.waiting["w3"].reason == adm.INADMISSIBLE


def test_the_namespace_selector_decides_who_may_use_a_queue() -> None:
    only_a = replace(
        cq("a", 4), namespace_selector=NamespaceSelector((("In", frozenset({"ns-a"})),))
    )
    result = admission_cycle(
        [only_a],
        FLAVORS,
        [wl("in", "a", 1, local_queue="ns-a/q"), wl("out", "a", 1, local_queue="ns-b/q")],
        [],
    )
    assert [a.workload.key for a in result.admitted] == ["in"]
    assert result.waiting["out"].reason == adm.INADMISSIBLE
    assert "namespace ns-b is not selected" in result.waiting["out"].message


def test_a_tainted_flavor_needs_a_toleration() -> None:
    taint = Taint("spot", "true", TaintEffect.NO_SCHEDULE)
    flavors = {**FLAVORS, "h100": replace(FLAVORS["h100"], node_taints=(taint,))}
    queues = [cq("a", {"h100": 4, "a100": 4})]
    plain = admission_cycle(queues, flavors, [wl("w", "a", 1)], [])
    assert dict(plain.admitted[0].assignment.flavors) == {GPU: "a100"}
    tolerant = replace(wl("t", "a", 1), tolerations=(Toleration("spot", "Equal", "true"),))
    chosen = admission_cycle(queues, flavors, [tolerant], [])
    assert dict(chosen.admitted[0].assignment.flavors) == {GPU: "h100"}
    # A flavor that tolerates its own taints is open to everyone (Kueue's rule).
    self_tolerated = replace(flavors["h100"], tolerations=(Toleration("spot", "Exists"),))
    both = admission_cycle(queues, {**flavors, "h100": self_tolerated}, [wl("w", "a", 1)], [])
    assert dict(both.admitted[0].assignment.flavors) == {GPU: "h100"}


def test_the_tournament_prefers_the_subtree_with_the_lower_share() -> None:
    # org <- {big (weight 3), small (weight 1)}; both orgs' heads ask 2 GPUs beyond their
    # subtree's quota: the big org's share is a third of the small one's, so it goes first.
    tree = [
        Cohort("org", "", _gpu_groups(8)),
        Cohort("big", "org", (), 3.0),
        Cohort("small", "org", (), 1.0),
    ]
    queues = [cq("b", 1, cohort="big"), cq("s", 1, cohort="small")]
    pending = [wl("s1", "s", 3, created=0), wl("b1", "b", 3, created=1)]
    result = admission_cycle(queues, FLAVORS, pending, [], cohorts=tree, limit=1)
    assert [a.workload.key for a in result.admitted] == ["b1"]
    # Priority still comes first.
    urgent = [replace(pending[0], priority=10), pending[1]]
    first = admission_cycle(queues, FLAVORS, urgent, [], cohorts=tree, limit=1)
    assert [a.workload.key for a in first.admitted] == ["s1"]


def _gpu_groups(gpus: int):
    quota = MappingProxyType({GPU: ResourceQuota(gpus * G)})
    return (ResourceGroup((GPU,), (FlavorQuotas("h100", quota),)),)


def test_a_higher_priority_class_preempts_within_the_queue() -> None:
    # What a WorkloadPriorityClass gives a workload is its priority; LowerPriority preemption
    # acts on it.
    queues = [cq("a", 4, within=WithinClusterQueue.LOWER_PRIORITY)]
    admitted = [held("low", "a", 4, priority=100)]
    result = admission_cycle(queues, FLAVORS, [wl("high", "a", 2, priority=10000)], admitted)
    assert result.admitted[0].victims == ("low",)
    none = admission_cycle(queues, FLAVORS, [wl("same", "a", 2, priority=100)], admitted)
    assert not none.admitted


def test_a_workload_past_the_starvation_bound_stops_its_cohort_until_its_quota_frees() -> None:
    """A borrowing queue's 8-GPU workload finds 4 GPUs free in the cohort: without a bound the
    lighter queue's 2-GPU workloads take them (and every GPU that frees later); past the bound
    (created at 0, now 7 h, bound 6 h) nothing else in the cohort is admitted, and the message
    says whom they wait behind; a queue outside the cohort is not held."""
    queues = [cq("a", 4, cohort="x"), cq("b", 4, cohort="x"), cq("c", 2)]
    admitted = [held("a-run", "a", 4)]
    pending = [
        wl("big", "a", 8, created=0),
        wl("small-1", "b", 2, created=100),
        wl("small-2", "b", 2, created=200),
        wl("elsewhere", "c", 2, created=300),
    ]
    kueue = admission_cycle(queues, FLAVORS, pending, admitted, now=7 * 3600.0)
    assert admitted_keys(kueue) == ["small-1", "small-2", "elsewhere"]
    bounded = admission_cycle(
        queues, FLAVORS, pending, admitted, now=7 * 3600.0, starving_after_s=6 * 3600.0
    )
    assert admitted_keys(bounded) == ["elsewhere"]
    assert bounded.waiting["big"].reason == adm.WAITING_FOR_QUOTA
    assert "waiting behind big" in bounded.waiting["small-1"].message
    early = admission_cycle(
        queues, FLAVORS, pending, admitted, now=5 * 3600.0, starving_after_s=6 * 3600.0
    )
    assert admitted_keys(early) == ["small-1", "small-2", "elsewhere"]
