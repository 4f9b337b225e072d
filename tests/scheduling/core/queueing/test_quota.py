"""Quota accounting: nominal quota, borrowing and lending limits, reclaim, Kueue's DRS."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.quota import MAX_SHARE, QuotaBook
from scheduling.core.queueing.resources import CPU, GPU
from tests.scheduling.core.queueing.builders import FLAVORS, G, cq, held, wl

H100 = ("h100", GPU)


def book(*queues, usage=None):
    b = QuotaBook(queues)
    for name, gpus in (usage or {}).items():
        b.charge(name, {H100: round(gpus * G)})
    return b


# (case, queues, usage before, queue asking, GPUs asked, allow borrowing, fits)
RULES = [
    ("nominal: fits up to it", [cq("a", 8)], {"a": 6}, "a", 2, True, True),
    ("nominal: never beyond without a cohort", [cq("a", 8)], {"a": 6}, "a", 3, True, False),
    (
        "borrow: all of an idle neighbour's quota",
        [cq("a", 8, cohort="c"), cq("b", 8, cohort="c")],
        {"a": 8},
        "a",
        8,
        True,
        True,
    ),
    (
        "borrow: not more than the cohort has",
        [cq("a", 8, cohort="c"), cq("b", 8, cohort="c")],
        {"a": 8},
        "a",
        9,
        True,
        False,
    ),
    (
        "borrow: within borrowingLimit",
        [cq("a", 8, cohort="c", borrowing=4), cq("b", 8, cohort="c")],
        {"a": 8},
        "a",
        4,
        True,
        True,
    ),
    (
        "borrow: never beyond borrowingLimit",
        [cq("a", 8, cohort="c", borrowing=4), cq("b", 8, cohort="c")],
        {"a": 8},
        "a",
        5,
        True,
        False,
    ),
    (
        "lend: up to the neighbour's lendingLimit",
        [cq("a", 8, cohort="c"), cq("b", 8, cohort="c", lending=2)],
        {"a": 8},
        "a",
        2,
        True,
        True,
    ),
    (
        "lend: never beyond the neighbour's lendingLimit",
        [cq("a", 8, cohort="c"), cq("b", 8, cohort="c", lending=2)],
        {"a": 8},
        "a",
        3,
        True,
        False,
    ),
    (
        "reclaim: lent quota is in use, the owner must take it back first",
        [cq("a", 8, cohort="c"), cq("b", 8, cohort="c")],
        {"b": 16},
        "a",
        1,
        True,
        False,
    ),
    (
        "reclaim: what the borrower gave back is the owner's again",
        [cq("a", 8, cohort="c"), cq("b", 8, cohort="c")],
        {"b": 12},
        "a",
        4,
        True,
        True,
    ),
    (
        "guaranteed: the part kept back from lending stays usable",
        [cq("a", 8, cohort="c", lending=2), cq("b", 8, cohort="c")],
        {"a": 0, "b": 10},
        "a",
        6,
        True,
        True,
    ),
    (
        "guaranteed: but not more once the lent part is borrowed",
        [cq("a", 8, cohort="c", lending=2), cq("b", 8, cohort="c")],
        {"a": 6, "b": 10},
        "a",
        1,
        True,
        False,
    ),
    (
        "no borrowing asked: nominal is the limit even with idle neighbours",
        [cq("a", 8, cohort="c"), cq("b", 8, cohort="c")],
        {"a": 6},
        "a",
        3,
        False,
        False,
    ),
]


@pytest.mark.parametrize(
    ("queues", "usage", "asking", "gpus", "allow", "expected"),
    [case[1:] for case in RULES],
    ids=[case[0] for case in RULES],
)
def test_quota_rules(queues, usage, asking, gpus, allow, expected) -> None:
    b = book(*queues, usage=usage)
    reason = b.fits(asking, {H100: round(gpus * G)}, allow_borrowing=allow)
    assert (reason is None) == expected, reason


def test_available_is_exactly_what_fits() -> None:
    b = book(
        cq("a", 8, cohort="c", borrowing=6),
        cq("b", 8, cohort="c", lending=3),
        cq("d", 4, cohort="c"),
        usage={"a": 9, "b": 2, "d": 1},
    )
    for name in ("a", "b", "d"):
        room = b.available(name, H100)
        assert b.fits(name, {H100: room}) is None
        assert b.fits(name, {H100: room + 1}) is not None


def test_messages_say_what_is_missing() -> None:
    b = book(cq("a", 8), usage={"a": 6})
    assert b.fits("a", {H100: 3 * G}) == (
        "insufficient unused quota for nvidia.com/gpu in flavor h100: 1 more needed"
    )
    assert "request 9 > maximum capacity 8" in str(b.fits("a", {H100: 9 * G}))
    assert b.fits("a", {("a100", GPU): G}) == "flavor a100 has no quota for nvidia.com/gpu"


# --- Kueue's dominant resource share, computed by hand -----------------------------------------


def test_drs_hand_computed_examples() -> None:
    # Cohort of 40 lendable GPUs: a (10), b (10), c (20, weight 2).
    b = book(
        cq("a", 10, cohort="x"),
        cq("b", 10, cohort="x"),
        cq("c", 20, cohort="x", weight=2),
        usage={"a": 16, "b": 10, "c": 14},
    )
    assert b.dominant_resource_share("a") == (6 * 1000 // 40, GPU)  # 150
    assert b.dominant_resource_share("b") == (0, "")
    assert b.dominant_resource_share("c") == (0, "")
    # With the request counted: a +2 -> 8 borrowed; b +2 -> 2 borrowed.
    assert b.dominant_resource_share("a", {H100: 2 * G})[0] == 200
    assert b.dominant_resource_share("b", {H100: 2 * G})[0] == 50
    # Weight 2 halves the share: 8 borrowed of 40 is 200, weighted 100.
    assert b.dominant_resource_share("c", {H100: 14 * G})[0] == 100


def test_drs_integer_arithmetic_weights_and_dominant_resource() -> None:
    # Kueue truncates: 1 of 3 lendable is 333; weight 0.5 doubles it.
    b = book(cq("a", 1, cohort="x"), cq("b", 2, cohort="x"), usage={"a": 2})
    assert b.dominant_resource_share("a")[0] == 333
    half = book(cq("a", 1, cohort="x", weight=0.5), cq("b", 2, cohort="x"), usage={"a": 2})
    assert half.dominant_resource_share("a")[0] == 666
    # Weight 0: the maximum share once borrowing, 0 within nominal (Kueue's zeroWeightBorrows,
    # pkg/cache/scheduler/fair_sharing.go).
    zero = book(cq("a", 1, cohort="x", weight=0), cq("b", 2, cohort="x"))
    assert zero.dominant_resource_share("a") == (0, "")
    zero.charge("a", {H100: 2 * G})
    assert zero.dominant_resource_share("a") == (MAX_SHARE, "")
    assert book(cq("solo", 1), usage={"solo": 1}).dominant_resource_share("solo") == (0, "")


def test_drs_takes_the_dominant_resource() -> None:
    from scheduling.core.queueing.config import (
        ClusterQueue,
        FlavorQuotas,
        ResourceGroup,
        ResourceQuota,
    )

    def two(name: str) -> ClusterQueue:
        quotas = {CPU: ResourceQuota(5000), GPU: ResourceQuota(20 * G)}
        return ClusterQueue(
            name, "x", (ResourceGroup((CPU, GPU), (FlavorQuotas("h100", quotas),)),)
        )

    b = QuotaBook([two("a"), two("b")])
    # cpu: 1 borrowed of 10 lendable -> 100; gpu: 2 borrowed of 40 -> 50. CPU dominates.
    b.charge("a", {("h100", CPU): 6000, H100: 22 * G})
    assert b.dominant_resource_share("a") == (100, CPU)


# --- properties --------------------------------------------------------------------------------

queue_specs = st.lists(
    st.tuples(
        st.integers(0, 12),  # nominal GPUs
        st.one_of(st.none(), st.integers(0, 8)),  # borrowing limit
        st.one_of(st.none(), st.integers(0, 12)),  # lending limit (clipped to nominal)
    ),
    min_size=1,
    max_size=4,
)
requests = st.lists(st.tuples(st.integers(0, 3), st.integers(1, 8)), max_size=30)


def _queues(specs):
    return [
        cq(
            f"q{k}",
            nominal,
            cohort="c",
            borrowing=borrow,
            lending=None if lend is None else min(lend, nominal),
        )
        for k, (nominal, borrow, lend) in enumerate(specs)
    ]


def _check_invariants(queues, usage) -> None:
    pool = sum(q.quota("h100", GPU).lendable for q in queues)
    for q in queues:
        quota = q.quota("h100", GPU)
        used = usage.get(q.name, 0)
        if quota.borrowing_limit is not None:
            assert used <= quota.nominal + quota.borrowing_limit
        # Lending limits: the others together never use more of q's quota than it lends.
        others = sum(usage.get(m.name, 0) for m in queues if m is not q)
        others_nominal = sum(m.quota("h100", GPU).nominal for m in queues if m is not q)
        assert others <= others_nominal + quota.lendable
    assert sum(usage.values()) <= sum(q.quota("h100", GPU).nominal for q in queues)
    beyond = sum(max(0, usage.get(q.name, 0) - q.quota("h100", GPU).guaranteed) for q in queues)
    assert beyond <= pool


@settings(max_examples=200, deadline=None)
@given(queue_specs, requests)
def test_admitting_only_what_fits_never_breaks_a_limit(specs, asks) -> None:
    queues = _queues(specs)
    b = QuotaBook(queues)
    for who, gpus in asks:
        name = queues[who % len(queues)].name
        amount = {H100: gpus * G}
        if b.fits(name, amount) is None:
            b.charge(name, amount)
        _check_invariants(queues, {q.name: b.used(q.name, H100) for q in queues})


@settings(max_examples=150, deadline=None)
@given(queue_specs, requests, st.lists(st.integers(0, 3), max_size=10))
def test_an_admission_cycle_never_breaks_a_limit(specs, asks, holders) -> None:
    queues = _queues(specs)
    # Some quota already held (within limits: admitted one by one while it fits).
    b = QuotaBook(queues)
    admitted = []
    for k, who in enumerate(holders):
        name = queues[who % len(queues)].name
        if b.fits(name, {H100: G}) is None:
            b.charge(name, {H100: G})
            admitted.append(held(f"h{k}", name, 1))
    pending = [
        wl(f"w{k}", queues[who % len(queues)].name, gpus, created=float(k))
        for k, (who, gpus) in enumerate(asks)
    ]
    result = admission_cycle(queues, FLAVORS, pending, admitted)
    usage = {q.name: b.used(q.name, H100) for q in queues}
    for admission in result.admitted:
        for (flavor, _), amount in admission.assignment.usage.items():
            assert flavor == "h100"
            usage[admission.workload.cluster_queue] += amount
    _check_invariants(queues, usage)
    assert len(result.admitted) + len(result.waiting) == len(pending)
