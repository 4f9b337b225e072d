"""Who may preempt whom, and the fewest victims that make room in quota (Kueue's classic
preemption: withinClusterQueue, reclaimWithinCohort, borrowWithinCohort).

Service classes rank `online` > `batch` > `opportunistic`: a higher class may preempt a lower one
whatever their priorities (online preempts batch and opportunistic work), a lower class never
preempts a higher one, and within one class the queue's policy decides by priority. The same rule
serves the node-level PostFilter plugin (plugins/preemption.py).

Victims are tried in Kueue's order: workloads of other cluster queues that are borrowing first, then
lower priority first, then the most recently admitted (then created) first. Each is removed until
the preemptor fits; then every victim but the last is given back if the preemptor still fits
without it, so the set is minimal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduling.core.queueing.config import (
    BorrowWithinCohortPolicy,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from scheduling.core.queueing.quota import FlavorResource, QuotaBook, Usage
from scheduling.core.types import ServiceClass

CLASS_RANK: Mapping[ServiceClass, int] = MappingProxyType(
    {ServiceClass.ONLINE: 2, ServiceClass.BATCH: 1, ServiceClass.OPPORTUNISTIC: 0}
)
_EMPTY_USAGE: Usage = MappingProxyType({})


def class_allows(preemptor: ServiceClass, victim: ServiceClass) -> bool | None:
    """True: the preemptor's class outranks the victim's; False: never (the victim outranks it);
    None: same class, priority decides."""
    a, b = CLASS_RANK[preemptor], CLASS_RANK[victim]
    if a == b:
        return None
    return a > b


def may_preempt(
    *,
    preemptor_class: ServiceClass,
    preemptor_priority: int,
    preemptor_created: float,
    victim_class: ServiceClass,
    victim_priority: int,
    victim_created: float,
    rule: str,
) -> bool:
    """`rule` is a policy value: Never, LowerPriority, LowerOrNewerEqualPriority or Any."""
    if rule == "Never":
        return False
    by_class = class_allows(preemptor_class, victim_class)
    if by_class is not None:
        return by_class
    if rule == "Any":
        return True
    if victim_priority < preemptor_priority:
        return True
    return (
        rule == WithinClusterQueue.LOWER_OR_NEWER_EQUAL_PRIORITY.value
        and victim_priority == preemptor_priority
        and victim_created > preemptor_created
    )


@dataclass(frozen=True, slots=True)
class AdmittedWorkload:
    """A workload holding quota."""

    key: str
    cluster_queue: str
    priority: int = 0
    service_class: ServiceClass = ServiceClass.BATCH
    created_at: float = 0.0
    admitted_at: float = 0.0
    usage: Usage = field(default_factory=lambda: _EMPTY_USAGE)
    local_queue: str = ""
    idle: Usage = field(default_factory=lambda: _EMPTY_USAGE)  # held but unused (telemetry)
    active: bool = True  # Kueue's spec.active: false evicts it (admission.Eviction)


@dataclass(frozen=True, slots=True)
class Preemptor:
    key: str
    cluster_queue: str
    priority: int
    service_class: ServiceClass
    created_at: float
    can_preempt: bool = True


def find_victims(
    book: QuotaBook,
    preemptor: Preemptor,
    need: Usage,
    admitted: Sequence[AdmittedWorkload],
) -> tuple[str, ...] | None:
    """The fewest admitted workloads whose eviction lets `need` fit in the preemptor's cluster
    queue, or None. The book is left as it was."""
    if not preemptor.can_preempt or not need:
        return None
    cq = book.queues[preemptor.cluster_queue]
    policy = cq.preemption
    frs = {fr for fr, amount in need.items() if amount > 0}

    def uses(a: AdmittedWorkload) -> bool:
        return any(a.usage.get(fr, 0) > 0 for fr in frs)

    def allowed(a: AdmittedWorkload, rule: str) -> bool:
        return may_preempt(
            preemptor_class=preemptor.service_class,
            preemptor_priority=preemptor.priority,
            preemptor_created=preemptor.created_at,
            victim_class=a.service_class,
            victim_priority=a.priority,
            victim_created=a.created_at,
            rule=rule,
        )

    own = [
        a
        for a in admitted
        if a.cluster_queue == cq.name and uses(a) and allowed(a, policy.within_cluster_queue)
    ]
    tree = set(book.members(cq.name))  # Kueue: candidates from the whole cohort tree
    others = [
        a for a in admitted if a.cluster_queue != cq.name and a.cluster_queue in tree and uses(a)
    ]
    attempts: list[tuple[list[AdmittedWorkload], bool]] = []
    if policy.reclaim_within_cohort is not ReclaimWithinCohort.NEVER or own:
        reclaim = [a for a in others if allowed(a, policy.reclaim_within_cohort.value)]
        attempts.append((own + reclaim, False))
    if policy.borrow_within_cohort is BorrowWithinCohortPolicy.LOWER_PRIORITY:
        threshold = policy.borrow_max_priority_threshold
        borrow = [
            a
            for a in others
            if allowed(a, "LowerPriority") and (threshold is None or a.priority <= threshold)
        ]
        attempts.append((own + borrow, True))
    if own:
        attempts.append((own, True))
    for candidates, allow_borrowing in attempts:
        victims = _minimal(book, cq.name, need, frs, candidates, allow_borrowing)
        if victims is not None:
            return victims
    return None


def _minimal(
    book: QuotaBook,
    cq: str,
    need: Usage,
    frs: set[FlavorResource],
    candidates: list[AdmittedWorkload],
    allow_borrowing: bool,
) -> tuple[str, ...] | None:
    if not candidates:
        return None
    ordered = sorted(
        candidates,
        key=lambda a: (a.cluster_queue == cq, a.priority, -a.admitted_at, -a.created_at, a.key),
    )
    removed: list[AdmittedWorkload] = []
    fits = False
    try:
        for a in ordered:
            # Reclaim only from queues still borrowing what the preemptor needs.
            if a.cluster_queue != cq and not book.is_borrowing(a.cluster_queue, frs):
                continue
            book.charge(a.cluster_queue, a.usage, -1)
            removed.append(a)
            if book.fits(cq, need, allow_borrowing=allow_borrowing) is None:
                fits = True
                break
        if not fits:
            return None
        victims = list(removed)
        for a in reversed(removed[:-1]):
            book.charge(a.cluster_queue, a.usage, 1)
            if book.fits(cq, need, allow_borrowing=allow_borrowing) is None:
                victims.remove(a)
                removed.remove(a)
            else:
                book.charge(a.cluster_queue, a.usage, -1)
        return tuple(a.key for a in victims)
    finally:
        for a in removed:
            book.charge(a.cluster_queue, a.usage, 1)
