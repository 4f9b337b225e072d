"""Quota accounting: nominal quota, borrowing and lending limits, reclaim, Kueue's DRS."""

from __future__ import annotations

from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.config import Cohort, FlavorQuotas, ResourceGroup, ResourceQuota
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


def _gpu_quota(queue) -> ResourceQuota:
    quota = queue.quota("h100", GPU)
    assert quota is not None
    return quota


def _lendable(quota) -> int:
    """The flat formula (one cohort): what the cohort may use of a queue's quota."""
    return quota.nominal if quota.lending_limit is None else min(quota.nominal, quota.lending_limit)


def _check_invariants(queues, usage) -> None:
    pool = sum(_lendable(q.quota("h100", GPU)) for q in queues)
    for q in queues:
        quota = q.quota("h100", GPU)
        used = usage.get(q.name, 0)
        if quota.borrowing_limit is not None:
            assert used <= quota.nominal + quota.borrowing_limit
        # Lending limits: the others together never use more of q's quota than it lends.
        others = sum(usage.get(m.name, 0) for m in queues if m is not q)
        others_nominal = sum(m.quota("h100", GPU).nominal for m in queues if m is not q)
        assert others <= others_nominal + _lendable(quota)
    assert sum(usage.values()) <= sum(q.quota("h100", GPU).nominal for q in queues)
    beyond = sum(
        max(
            0,
            usage.get(q.name, 0) - (q.quota("h100", GPU).nominal - _lendable(q.quota("h100", GPU))),
        )
        for q in queues
    )
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


# --- cohort trees (Kueue's hierarchical cohorts) -----------------------------------------------


def cohort(
    name: str, parent: str = "", gpus: float = 0, *, lending=None, borrowing=None, weight=1.0
):
    quota = ResourceQuota(
        round(gpus * G),
        None if borrowing is None else round(borrowing * G),
        None if lending is None else round(lending * G),
    )
    groups = (ResourceGroup((GPU,), (FlavorQuotas("h100", MappingProxyType({GPU: quota})),)),)
    return Cohort(
        name, parent, groups if gpus or lending is not None or borrowing is not None else (), weight
    )


def test_a_cohort_tree_lends_through_its_parent() -> None:
    # org <- {research, product}; queue a in research, b in product: a borrows b's idle quota
    # through org, two levels up.
    tree = [cohort("org"), cohort("research", "org"), cohort("product", "org")]
    b = QuotaBook([cq("a", 4, cohort="research"), cq("b", 8, cohort="product")], cohorts=tree)
    assert b.available("a", H100) == 12 * G
    assert b.fits("a", {H100: 10 * G}) is None
    b.charge("a", {H100: 10 * G})
    assert b.borrowed("a", H100) == 6 * G
    assert b.available("b", H100) == 2 * G  # what a left of b's quota
    assert b.members("a") == ["a", "b"]
    assert b.cohort_chain("a") == ["research", "org"]


def test_a_cohort_lending_limit_keeps_its_subtree_quota_home() -> None:
    tree = [cohort("org"), cohort("research", "org"), cohort("product", "org", 0, lending=2)]
    b = QuotaBook([cq("a", 4, cohort="research"), cq("b", 8, cohort="product")], cohorts=tree)
    assert b.available("a", H100) == 6 * G  # product lends only 2 of its 8
    assert "insufficient quota for nvidia.com/gpu in flavor h100" in str(b.fits("a", {H100: 7 * G}))
    assert b.max_capacity("a", H100) == 6 * G
    assert b.available("b", H100) == 8 * G + 4 * G  # b may still borrow a's 4 through org


def test_a_cohort_borrowing_limit_caps_what_its_subtree_takes_from_above() -> None:
    tree = [cohort("org"), cohort("research", "org", 0, borrowing=1), cohort("product", "org")]
    b = QuotaBook([cq("a", 4, cohort="research"), cq("b", 8, cohort="product")], cohorts=tree)
    assert b.available("a", H100) == 5 * G
    b.charge("a", {H100: 5 * G})
    assert b.fits("a", {H100: G}) is not None


def test_cohort_quota_is_a_pool_for_the_queues_below_it() -> None:
    # Kueue: a cohort's nominalQuota is additional quota; a queue needs quota (even 0) for the
    # flavor and resource to borrow it.
    b = QuotaBook(
        [cq("a", 0, cohort="pool"), cq("b", 0, cohort="pool")], cohorts=[cohort("pool", "", 6)]
    )
    assert b.available("a", H100) == 6 * G
    b.charge("a", {H100: 4 * G})
    assert b.available("b", H100) == 2 * G
    assert b.cohort_resources("pool") == {H100: (6 * G, 6 * G, 4 * G)}


def test_shares_up_the_tree_compare_subtrees_by_their_weight() -> None:
    # org <- {important (0.75), regular (0.25)}: the same borrowing weighs three times less in
    # the important org's share.
    tree = [
        cohort("org", "", 8),
        cohort("important", "org", weight=0.75),
        cohort("regular", "org", weight=0.25),
    ]
    queues = [cq("i", 1, cohort="important"), cq("r", 1, cohort="regular")]
    b = QuotaBook(queues, cohorts=tree)
    important = b.path_shares("i", {H100: 3 * G})
    regular = b.path_shares("r", {H100: 3 * G})
    assert [c for c, _ in important] == ["important", "org"]
    # 2 GPUs above the subtree's 1, of the 10 the org could offer: 200, then / weight.
    assert important[1][1] == 200 * 1000 // 750
    assert regular[1][1] == 200 * 1000 // 250
    assert b.used("i", H100) == 0  # path_shares leaves the book as it was


def test_a_stored_cycle_never_hangs_the_book() -> None:
    b = QuotaBook([cq("a", 1, cohort="x")], cohorts=[cohort("x", "y"), cohort("y", "x")])
    assert b.available("a", H100) >= G


tree_specs = st.lists(
    st.tuples(
        st.integers(0, 2),  # where: 0 under the root, 1 in cohort c1, 2 in cohort c2
        st.integers(0, 8),  # nominal GPUs
        st.one_of(st.none(), st.integers(0, 6)),  # borrowing limit
        st.one_of(st.none(), st.integers(0, 8)),  # lending limit (clipped to nominal)
    ),
    min_size=1,
    max_size=5,
)
cohort_limits = st.tuples(
    st.integers(0, 4),  # own nominal
    st.one_of(st.none(), st.integers(0, 6)),  # borrowing limit
    st.one_of(st.none(), st.integers(0, 10)),  # lending limit
)


@settings(max_examples=200, deadline=None)
@given(tree_specs, cohort_limits, cohort_limits, st.integers(0, 6), requests)
def test_admitting_what_fits_in_a_tree_never_breaks_a_limit(specs, c1, c2, root_gpus, asks) -> None:
    """Whatever the tree, admitting only what fits keeps every subtree within its quota plus its
    borrowing limit, and lets the rest of the tree use no more of a subtree than it lends."""
    cohorts = [
        cohort("root", "", root_gpus),
        cohort("c1", "root", c1[0], borrowing=c1[1], lending=c1[2]),
        cohort("c2", "root", c2[0], borrowing=c2[1], lending=c2[2]),
    ]
    where = {0: "root", 1: "c1", 2: "c2"}
    queues = [
        cq(
            f"q{k}",
            nominal,
            cohort=where[place],
            borrowing=borrow,
            lending=None if lend is None else min(lend, nominal),
        )
        for k, (place, nominal, borrow, lend) in enumerate(specs)
    ]
    b = QuotaBook(queues, cohorts=cohorts)
    for who, gpus in asks:
        name = queues[who % len(queues)].name
        if b.fits(name, {H100: gpus * G}) is None:
            b.charge(name, {H100: gpus * G})
    used = {q.name: b.used(q.name, H100) for q in queues}
    nominal = {q.name: _gpu_quota(q).nominal for q in queues}
    own = {
        c.name: (c.flavor_resources()[0][2] if c.resource_groups else ResourceQuota(0))
        for c in cohorts
    }
    subtrees = {
        "c1": [q.name for q in queues if q.cohort == "c1"],
        "c2": [q.name for q in queues if q.cohort == "c2"],
    }
    total_quota = sum(nominal.values()) + sum(limit.nominal for limit in own.values())
    assert sum(used.values()) <= total_quota
    for q in queues:
        quota = _gpu_quota(q)
        if quota.borrowing_limit is not None:
            assert used[q.name] <= quota.nominal + quota.borrowing_limit
        if quota.lending_limit is not None:
            others_used = sum(used.values()) - used[q.name]
            assert others_used <= total_quota - quota.nominal + quota.lending_limit
    for name, members in subtrees.items():
        limit = own[name]
        inside = sum(used[m] for m in members)
        quota_inside = sum(nominal[m] for m in members) + limit.nominal
        if limit.borrowing_limit is not None:
            assert inside <= quota_inside + limit.borrowing_limit
        if limit.lending_limit is not None:
            outside = sum(used.values()) - inside
            assert outside <= total_quota - quota_inside + limit.lending_limit
