"""One admission cycle: which pending workloads get quota now, with which flavor, and which
admitted workloads are preempted to make room. Kueue's semantics:

1. Each cluster queue orders its pending workloads: higher priority first; then, among a queue's
   local queues (tenants), the one using the least of the queue's nominal quota for its weight
   (usage-aware ordering); then FIFO by creation time.
2. Every queue nominates its head: flavor assignment (below) says Fit, Preempt (fits once the
   victims are evicted) or NoFit. A NoFit head of a `BestEffortFIFO` queue is set aside and the
   next workload nominated; in a `StrictFIFO` queue it blocks everything behind it.
3. Among the nominated heads, the next one admitted is the highest priority, then the lowest
   dominant resource share after admission (Kueue's DRS with weights: fair sharing across the
   cohort), then the oldest. Admission charges the quota book, so the next round sees it.

Flavor assignment: for each resource group of the queue that the workload needs, the flavors are
tried in the listed order, skipping those that conflict with the pods' node selector or allowed GPU
models (`nvidia.com/gpu.product`). The first flavor that fits without borrowing wins, else the first
that fits by borrowing, else the first where preemption makes room. One flavor per resource group
for the whole workload (Kueue assigns per pod set; gpusched's pod sets share it).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduling.core.queueing.config import (
    ClusterQueue,
    LocalQueue,
    QueueingStrategy,
    ResourceFlavor,
)
from scheduling.core.queueing.preemption import AdmittedWorkload, Preemptor, find_victims
from scheduling.core.queueing.quota import FlavorResource, QuotaBook, Usage
from scheduling.core.queueing.resources import Demand
from scheduling.core.types import ServiceClass

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# Why a workload waits (Kueue's QuotaReserved=False reasons, plus the placement ones).
WAITING_FOR_QUOTA = "WaitingForQuota"
NO_MATCHING_FLAVOR = "NoMatchingFlavor"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
INADMISSIBLE = "Inadmissible"  # no such local queue / cluster queue
NO_FIT = "NoFit"
TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
WAITING_FOR_GANG = "WaitingForGang"
PREEMPTED = "Preempted"

_EMPTY_SELECTOR: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class QueuedWorkload:
    key: str
    cluster_queue: str
    local_queue: str = ""  # "namespace/name"
    priority: int = 0
    service_class: ServiceClass = ServiceClass.BATCH
    created_at: float = 0.0
    demand: Demand = field(default_factory=Demand)
    gpu_models: frozenset[str] = frozenset()
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY_SELECTOR)
    can_preempt: bool = True

    def preemptor(self) -> Preemptor:
        return Preemptor(
            self.key,
            self.cluster_queue,
            self.priority,
            self.service_class,
            self.created_at,
            self.can_preempt,
        )


@dataclass(frozen=True, slots=True)
class Assignment:
    flavors: Mapping[str, str]  # resource -> flavor
    usage: Usage
    borrowing: bool = False

    def node_selector(self, flavors: Mapping[str, ResourceFlavor]) -> dict[str, str]:
        selector: dict[str, str] = {}
        for name in sorted(set(self.flavors.values())):
            flavor = flavors.get(name)
            if flavor is not None:
                selector.update(flavor.node_labels)
        return selector


@dataclass(frozen=True, slots=True)
class Nomination:
    assignment: Assignment | None
    victims: tuple[str, ...] = ()
    reason: str = ""
    message: str = ""

    @property
    def admissible(self) -> bool:
        return self.assignment is not None


@dataclass(frozen=True, slots=True)
class Admission:
    workload: QueuedWorkload
    assignment: Assignment
    victims: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Waiting:
    workload: QueuedWorkload
    reason: str
    message: str
    position: int  # 1-based, in its cluster queue's order (0: not in any queue)


@dataclass
class CycleResult:
    admitted: list[Admission] = field(default_factory=list)
    waiting: dict[str, Waiting] = field(default_factory=dict)

    @property
    def victims(self) -> list[tuple[str, str]]:
        """(victim key, preemptor key) pairs, in admission order."""
        return [(v, a.workload.key) for a in self.admitted for v in a.victims]


# --- ordering ------------------------------------------------------------------------------------


def local_queue_shares(
    book: QuotaBook,
    admitted: Sequence[AdmittedWorkload],
    weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Per local queue: the largest fraction of its cluster queue's nominal quota (any resource,
    all flavors) that its admitted workloads use, divided by its weight."""
    nominal: dict[tuple[str, str], int] = defaultdict(int)
    for name, queue in book.queues.items():
        for _, resource, quota in queue.flavor_resources():
            nominal[(name, resource)] += quota.nominal
    used: dict[tuple[str, str, str], int] = defaultdict(int)
    for a in admitted:
        for (_, resource), amount in a.usage.items():
            used[(a.local_queue, a.cluster_queue, resource)] += amount
    shares: dict[str, float] = defaultdict(float)
    for (lq, cq_name, resource), amount in used.items():
        total = nominal.get((cq_name, resource), 0)
        if total > 0:
            shares[lq] = max(shares[lq], amount / total)
    out: dict[str, float] = {}
    for lq, share in shares.items():
        weight = (weights or {}).get(lq, 1.0)
        out[lq] = share / weight if weight > 0 else float("inf")
    return out


def queue_order(
    workloads: Sequence[QueuedWorkload], lq_shares: Mapping[str, float]
) -> list[QueuedWorkload]:
    """One cluster queue's pending workloads in admission order (module doc, step 1)."""
    return sorted(
        workloads,
        key=lambda w: (-w.priority, lq_shares.get(w.local_queue, 0.0), w.created_at, w.key),
    )


def positions(
    book: QuotaBook,
    pending: Sequence[QueuedWorkload],
    admitted: Sequence[AdmittedWorkload],
    weights: Mapping[str, float] | None = None,
) -> dict[str, int]:
    """Each pending workload's 1-based place in its cluster queue."""
    shares = local_queue_shares(book, admitted, weights)
    by_queue: dict[str, list[QueuedWorkload]] = defaultdict(list)
    for w in pending:
        by_queue[w.cluster_queue].append(w)
    out: dict[str, int] = {}
    for items in by_queue.values():
        for k, w in enumerate(queue_order(items, shares), start=1):
            out[w.key] = k
    return out


# --- flavor assignment ----------------------------------------------------------------------------


def compatible(flavor: ResourceFlavor | None, workload: QueuedWorkload) -> bool:
    if flavor is None:
        return False
    for key, value in flavor.node_labels.items():
        wanted = workload.node_selector.get(key)
        if wanted is not None and wanted != value:
            return False
    product = flavor.node_labels.get(GPU_PRODUCT_LABEL)
    return not (workload.gpu_models and product is not None and product not in workload.gpu_models)


def nominate(
    book: QuotaBook,
    flavors: Mapping[str, ResourceFlavor],
    workload: QueuedWorkload,
    admitted: Sequence[AdmittedWorkload],
) -> Nomination:
    """Flavor assignment for `workload` in its cluster queue, with victims when it needs
    preemption (module doc)."""
    cq = book.queues[workload.cluster_queue]
    amounts = workload.demand.amounts(cq.covered)
    chosen: list[tuple[dict[str, str], dict[FlavorResource, int], bool]] = []
    open_groups: list[list[tuple[dict[str, str], dict[FlavorResource, int]]]] = []
    first_reason = ""
    for group in cq.resource_groups:
        need = {r: amounts[r] for r in group.covered if amounts.get(r, 0) > 0}
        if not need:
            continue
        options = [fq for fq in group.flavors if compatible(flavors.get(fq.name), workload)]
        if not options:
            names = ", ".join(fq.name for fq in group.flavors)
            return Nomination(
                None,
                reason=NO_MATCHING_FLAVOR,
                message=f"no flavor of ClusterQueue {cq.name} ({names}) matches the pods' "
                "node selector or GPU models",
            )
        fit: tuple[dict[str, str], dict[FlavorResource, int], bool] | None = None
        fit_borrowing: tuple[dict[str, str], dict[FlavorResource, int], bool] | None = None
        possible: list[tuple[dict[str, str], dict[FlavorResource, int]]] = []
        too_big = ""
        for fq in options:
            usage = {(fq.name, r): a for r, a in need.items()}
            resources = {r: fq.name for r in need}
            over = [fr for fr, a in usage.items() if a > book.max_capacity(cq.name, fr)]
            if over:
                too_big = too_big or str(book.fits(cq.name, {over[0]: usage[over[0]]}))
                continue
            possible.append((resources, usage))
            if fit is None and book.fits(cq.name, usage, allow_borrowing=False) is None:
                fit = (resources, usage, False)
                break
            if fit_borrowing is None and book.fits(cq.name, usage) is None:
                fit_borrowing = (resources, usage, True)
            first_reason = first_reason or str(book.fits(cq.name, usage))
        if not possible:
            return Nomination(None, reason=EXCEEDS_MAX_QUOTA, message=too_big)
        best = fit or fit_borrowing
        if best is not None:
            chosen.append(best)
        else:
            open_groups.append(possible)

    flavor_of: dict[str, str] = {}
    total: dict[FlavorResource, int] = {}
    borrowing = False
    for resources, group_usage, borrows in chosen:
        flavor_of.update(resources)
        total.update(group_usage)
        borrowing = borrowing or borrows
    if not open_groups:
        return Nomination(
            Assignment(MappingProxyType(flavor_of), MappingProxyType(total), borrowing)
        )

    for combination in itertools.product(*open_groups):
        trial_usage = dict(total)
        trial_flavors = dict(flavor_of)
        for resources, group_usage in combination:
            trial_usage.update(group_usage)
            trial_flavors.update(resources)
        victims = find_victims(book, workload.preemptor(), trial_usage, admitted)
        if victims is not None:
            return Nomination(
                Assignment(
                    MappingProxyType(trial_flavors),
                    MappingProxyType(trial_usage),
                    borrowing=True,
                ),
                victims=victims,
            )
    return Nomination(None, reason=WAITING_FOR_QUOTA, message=first_reason)


# --- the cycle ------------------------------------------------------------------------------------


def admission_cycle(
    cluster_queues: Sequence[ClusterQueue],
    flavors: Mapping[str, ResourceFlavor],
    pending: Sequence[QueuedWorkload],
    admitted: Sequence[AdmittedWorkload],
    *,
    local_queues: Sequence[LocalQueue] = (),
    limit: int | None = None,
    idle_weight: float = 0.0,
) -> CycleResult:
    """Admit what quota allows now (module doc). `admitted` is what holds quota before the cycle;
    `limit` caps the number of admissions; `idle_weight` counts what admitted workloads hold idle
    in the fair share (quota.QuotaBook)."""
    book = QuotaBook(cluster_queues, idle_weight=idle_weight)
    held = {a.key: a for a in admitted}
    for a in admitted:
        if a.cluster_queue in book.queues:
            book.charge(a.cluster_queue, a.usage)
            book.charge_idle(a.cluster_queue, a.idle)
    weights = {f"{lq.namespace}/{lq.name}": lq.weight for lq in local_queues}
    shares = local_queue_shares(book, admitted, weights)

    result = CycleResult()
    by_queue: dict[str, list[QueuedWorkload]] = defaultdict(list)
    for w in pending:
        if w.cluster_queue in book.queues:
            by_queue[w.cluster_queue].append(w)
        else:
            result.waiting[w.key] = Waiting(
                w, INADMISSIBLE, f"ClusterQueue {w.cluster_queue} does not exist", 0
            )
    queues = {name: queue_order(items, shares) for name, items in by_queue.items()}
    position = {w.key: k for items in queues.values() for k, w in enumerate(items, start=1)}
    cursor = dict.fromkeys(queues, 0)
    nominations: dict[str, Nomination] = {}
    admitted_now: set[str] = set()  # never victims in the cycle that admitted them
    # Per queue, the heads found inadmissible this cycle: a later head with the same constraints
    # asking at least as much of every resource cannot fit either (quota and victim search are
    # monotone in the amount), which keeps a long BestEffortFIFO queue cheap.
    failed: dict[str, list[tuple[tuple[object, ...], dict[str, int], Nomination]]] = defaultdict(
        list
    )

    def wait(w: QueuedWorkload, reason: str, message: str) -> None:
        result.waiting[w.key] = Waiting(w, reason, message, position[w.key])

    while cursor and (limit is None or len(result.admitted) < limit):
        heads: list[tuple[QueuedWorkload, Nomination]] = []
        for name in list(cursor):
            items = queues[name]
            if cursor[name] >= len(items):
                del cursor[name]
                continue
            head = items[cursor[name]]
            nomination = nominations.get(name)
            if nomination is None:
                signature = _signature(head, book.queues[name])
                amounts = head.demand.amounts(book.queues[name].covered)
                candidates = [a for a in held.values() if a.key not in admitted_now]
                nomination = _known_failure(failed[name], signature, amounts) or nominate(
                    book, flavors, head, candidates
                )
                nominations[name] = nomination
                if not nomination.admissible and signature is not None:
                    failed[name].append((signature, amounts, nomination))
            if nomination.admissible:
                heads.append((head, nomination))
                continue
            wait(head, nomination.reason, nomination.message)
            nominations.pop(name, None)
            if book.queues[name].queueing_strategy is QueueingStrategy.STRICT_FIFO:
                for behind in items[cursor[name] + 1 :]:
                    wait(
                        behind,
                        WAITING_FOR_QUOTA,
                        f"StrictFIFO: waiting behind {head.key} at the head of ClusterQueue {name}",
                    )
                del cursor[name]
            else:
                cursor[name] += 1
        if not heads:
            continue
        head, nomination = min(
            heads,
            key=lambda hn: (
                -hn[0].priority,
                book.dominant_resource_share(
                    hn[0].cluster_queue, hn[1].assignment.usage if hn[1].assignment else None
                )[0],
                hn[0].created_at,
                hn[0].key,
            ),
        )
        assert nomination.assignment is not None
        touched = {head.cluster_queue}
        for victim in nomination.victims:
            gone = held.pop(victim)
            book.charge(gone.cluster_queue, gone.usage, -1)
            book.charge_idle(gone.cluster_queue, gone.idle, -1)
            touched.add(gone.cluster_queue)
        book.charge(head.cluster_queue, nomination.assignment.usage)
        held[head.key] = AdmittedWorkload(
            head.key,
            head.cluster_queue,
            head.priority,
            head.service_class,
            head.created_at,
            admitted_at=float("inf"),  # newest of all
            usage=nomination.assignment.usage,
            local_queue=head.local_queue,
        )
        result.admitted.append(Admission(head, nomination.assignment, nomination.victims))
        admitted_now.add(head.key)
        cursor[head.cluster_queue] += 1
        # Every queue sharing quota with a changed one must nominate again.
        stale = {m for cq in touched for m in book.members(cq)}
        for name in stale:
            nominations.pop(name, None)
    for name, at in cursor.items():
        for w in queues[name][at:]:
            if w.key not in result.waiting:
                wait(w, WAITING_FOR_QUOTA, "not considered in this cycle")
    return result


def _signature(workload: QueuedWorkload, cq: ClusterQueue) -> tuple[object, ...] | None:
    """What besides the amounts decides admissibility (None: do not reuse failures)."""
    if cq.preemption.within_cluster_queue.value == "LowerOrNewerEqualPriority":
        return None  # victims depend on creation times too
    return (
        workload.priority,
        workload.service_class,
        workload.can_preempt,
        workload.gpu_models,
        tuple(sorted(workload.node_selector.items())),
    )


def _known_failure(
    failures: list[tuple[tuple[object, ...], dict[str, int], Nomination]],
    signature: tuple[object, ...] | None,
    amounts: dict[str, int],
) -> Nomination | None:
    if signature is None:
        return None
    for seen, smaller, nomination in failures:
        if seen == signature and all(amounts.get(r, 0) >= a for r, a in smaller.items()):
            return nomination
    return None
