"""One admission cycle: which pending workloads get quota now, with which flavor, and which
admitted workloads are preempted (or evicted) to make room. Kueue's semantics:

1. Each cluster queue orders its pending workloads (ordering.py: priority, usage-aware LocalQueue
   order, FIFO; or admission fair sharing by LocalQueue decayed usage).
2. Every queue nominates its head: flavor assignment (below) says Fit, Preempt (fits once the
   victims are evicted) or NoFit. A NoFit head of a `BestEffortFIFO` queue is set aside and the
   next workload nominated; in a `StrictFIFO` queue it blocks everything behind it.
3. Among the nominated heads, the next one admitted is the highest priority, then the fairest by
   Kueue's tournament over the cohort tree: at each cohort, the child (queue or cohort) with the
   lowest dominant resource share once the head is admitted wins (quota.path_shares), then the
   oldest. Admission charges the quota book, so the next round sees it.

With a starvation bound (`starving_after_s`, gpusched's, not Kueue's; issue 37), a workload that
has waited that long since it was created and finds no quota free for it stops the admissions of
its whole cohort tree for the rest of the cycle (the oldest such head, if several): quota then
frees for it as the admitted work ends, where otherwise every GPU freed went to smaller
workloads that fit, lighter tenants' first, and a big gang of a heavy tenant could wait for as
long as they kept coming.

Before that, admitted workloads that must go are returned as evictions (the shell carries them
out): deactivated ones (`spec.active: false`, InactiveWorkload) and those of a queue stopped with
`stopPolicy: HoldAndDrain` (ClusterQueueStopped, LocalQueueStopped). A deactivated pending
workload is never nominated; a stopped queue (Hold or HoldAndDrain) nominates nothing; a namespace
outside a queue's namespaceSelector is inadmissible there.

Flavor assignment: for each resource group of the queue that the workload needs, the flavors are
tried in the listed order, skipping those that conflict with the pods' node selector or allowed GPU
models (`nvidia.com/gpu.product`), those whose NoSchedule/NoExecute taints the pods (or the
flavor itself) do not tolerate, and those none of whose nodes could ever host a pod of some pod set
(feasibility.py: size, topology policy and scope, MIG profile; quota no node can use is never
reserved; no flavor left: the workload is Inadmissible with each flavor's reason). The first
flavor that fits without borrowing wins; one that fits by borrowing wins at once with
`flavorFungibility.whenCanBorrow: MayStopSearch` (Kueue's default), else only if no later flavor
fits without; else the first where preemption makes room. One flavor per resource group for the
whole workload (Kueue assigns per pod set; gpusched's pod sets share it).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduling.core.queueing.config import (
    ClusterQueue,
    Cohort,
    FungibilityPolicy,
    LocalQueue,
    QueueingStrategy,
    ResourceFlavor,
    StopPolicy,
)
from scheduling.core.queueing.fair_usage import FairUsageState
from scheduling.core.queueing.feasibility import Feasibility
from scheduling.core.queueing.ordering import QueueOrder, queue_orders
from scheduling.core.queueing.preemption import AdmittedWorkload, Preemptor, find_victims
from scheduling.core.queueing.quota import FlavorResource, QuotaBook, Usage
from scheduling.core.queueing.resources import Demand
from scheduling.core.types import PodRequest, ServiceClass, TaintEffect, Toleration

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

# Why a workload waits (Kueue's QuotaReserved=False reasons, plus the placement ones).
WAITING_FOR_QUOTA = "WaitingForQuota"
NO_MATCHING_FLAVOR = "NoMatchingFlavor"
EXCEEDS_MAX_QUOTA = "ExceedsMaxQuota"
INADMISSIBLE = "Inadmissible"  # no such local queue / cluster queue, stopped, namespace refused
NO_FIT = "NoFit"
TOPOLOGY_PLACEMENT_FAILED = "TopologyPlacementFailed"
WAITING_FOR_GANG = "WaitingForGang"
PREEMPTED = "Preempted"
# Evicted because its pods were not all placed in time (Kueue's waitForPodsReady); it waits out
# its requeue backoff before it is queued again.
PODS_READY_TIMEOUT = "PodsReadyTimeout"
# Why an admitted workload is evicted (Kueue's Evicted condition reasons).
INACTIVE_WORKLOAD = "InactiveWorkload"
CLUSTER_QUEUE_STOPPED = "ClusterQueueStopped"
LOCAL_QUEUE_STOPPED = "LocalQueueStopped"

_EMPTY_SELECTOR: Mapping[str, str] = MappingProxyType({})
_ENFORCED_TAINTS = (TaintEffect.NO_SCHEDULE, TaintEffect.NO_EXECUTE)


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
    tolerations: tuple[Toleration, ...] = ()
    active: bool = True  # Kueue's spec.active
    # One pod of each pod set (name, request): what feasibility checks against the nodes.
    pod_sets: tuple[tuple[str, PodRequest], ...] = ()
    requeue_at: float = 0.0  # Kueue's requeueState.requeueAt: not queued before (backoff)
    label: str = ""  # what messages name it by ("namespace/name"); `key` stays internal

    def shown(self) -> str:
        return self.label or self.key

    @property
    def namespace(self) -> str:
        return self.local_queue.partition("/")[0]

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


@dataclass(frozen=True, slots=True)
class Eviction:
    """An admitted workload that must give its quota back (not a preemption: nobody takes it)."""

    key: str
    reason: str  # INACTIVE_WORKLOAD, CLUSTER_QUEUE_STOPPED, LOCAL_QUEUE_STOPPED
    message: str


@dataclass
class CycleResult:
    admitted: list[Admission] = field(default_factory=list)
    waiting: dict[str, Waiting] = field(default_factory=dict)
    evictions: list[Eviction] = field(default_factory=list)

    @property
    def victims(self) -> list[tuple[str, str]]:
        """(victim key, preemptor key) pairs, in admission order."""
        return [(v, a.workload.key) for a in self.admitted for v in a.victims]


# --- flavor assignment ----------------------------------------------------------------------------


def compatible(flavor: ResourceFlavor | None, workload: QueuedWorkload) -> bool:
    if flavor is None:
        return False
    for key, value in flavor.node_labels.items():
        wanted = workload.node_selector.get(key)
        if wanted is not None and wanted != value:
            return False
    product = flavor.node_labels.get(GPU_PRODUCT_LABEL)
    if workload.gpu_models and product is not None and product not in workload.gpu_models:
        return False
    tolerations = (*workload.tolerations, *flavor.tolerations)
    return all(
        any(t.tolerates(taint) for t in tolerations)
        for taint in flavor.node_taints
        if taint.effect in _ENFORCED_TAINTS
    )


def nominate(
    book: QuotaBook,
    flavors: Mapping[str, ResourceFlavor],
    workload: QueuedWorkload,
    admitted: Sequence[AdmittedWorkload],
    feasibility: Feasibility | None = None,
) -> Nomination:
    """Flavor assignment for `workload` in its cluster queue, with victims when it needs
    preemption (module doc). Without `feasibility`, any flavor may host any pod."""
    cq = book.queues[workload.cluster_queue]
    stop_at_borrowing = cq.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH
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
                "node selector, GPU models or tolerations",
            )
        if feasibility is not None:
            refused = {
                fq.name: why
                for fq in options
                if (why := _unhostable(feasibility, workload, flavors[fq.name])) is not None
            }
            options = [fq for fq in options if fq.name not in refused]
            if not options:
                return Nomination(
                    None,
                    reason=INADMISSIBLE,
                    message="; ".join(why for why in refused.values()),
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
                if stop_at_borrowing:
                    break
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


def _unhostable(
    feasibility: Feasibility, workload: QueuedWorkload, flavor: ResourceFlavor
) -> str | None:
    """Why some pod set of `workload` could never run on `flavor`'s nodes, or None."""
    for name, pod in workload.pod_sets:
        why = feasibility.blocker(pod, flavor)
        if why is not None:
            return f"pod set {name}: {why}"
    return None


# --- choosing among the heads ---------------------------------------------------------------------


def pick_head(
    book: QuotaBook, heads: Sequence[tuple[QueuedWorkload, Nomination]]
) -> tuple[QueuedWorkload, Nomination]:
    """The head admitted next (module doc, step 3): priority, then Kueue's fair-sharing
    tournament up each cohort tree, then age. Queues outside any cohort compete at share 0."""
    shares: dict[str, dict[str, int]] = {}
    chains: dict[str, list[str]] = {}
    for w, nomination in heads:
        assert nomination.assignment is not None
        path = book.path_shares(w.cluster_queue, nomination.assignment.usage)
        shares[w.key] = dict(path)
        chains[w.key] = [cohort for cohort, _ in path]

    def rank(h: tuple[QueuedWorkload, Nomination], cohort: str) -> tuple[int, int, float, str]:
        w = h[0]
        return (-w.priority, shares[w.key].get(cohort, 0), w.created_at, w.key)

    # Cohorts deepest first: each forwards its best candidate to its parent.
    depth = {c: len(chain) - i for chain in chains.values() for i, c in enumerate(chain)}
    parent = {c: chain[i + 1] for chain in chains.values() for i, c in enumerate(chain[:-1])}
    candidates: dict[str, list[tuple[QueuedWorkload, Nomination]]] = defaultdict(list)
    finalists: list[tuple[tuple[QueuedWorkload, Nomination], str]] = []
    for h in heads:
        chain = chains[h[0].key]
        if chain:
            candidates[chain[0]].append(h)
        else:
            finalists.append((h, ""))

    def best_at(cohort: str) -> tuple[QueuedWorkload, Nomination]:
        return min(candidates[cohort], key=lambda h: rank(h, cohort))

    for cohort in sorted(depth, key=lambda c: (-depth[c], c)):
        best = best_at(cohort)
        if cohort in parent:
            candidates[parent[cohort]].append(best)
        else:
            finalists.append((best, cohort))
    return min(finalists, key=lambda hc: rank(hc[0], hc[1]))[0]


# --- the cycle ------------------------------------------------------------------------------------


def admission_cycle(
    cluster_queues: Sequence[ClusterQueue],
    flavors: Mapping[str, ResourceFlavor],
    pending: Sequence[QueuedWorkload],
    admitted: Sequence[AdmittedWorkload],
    *,
    local_queues: Sequence[LocalQueue] = (),
    cohorts: Sequence[Cohort] = (),
    fair_usage: FairUsageState | None = None,
    limit: int | None = None,
    idle_weight: float = 0.0,
    feasibility: Feasibility | None = None,
    now: float = 0.0,
    starving_after_s: float | None = None,
) -> CycleResult:
    """Admit what quota allows now (module doc). `admitted` is what holds quota before the cycle;
    `fair_usage` the LocalQueues' decayed usage (admission fair sharing); `limit` caps the number
    of admissions; `idle_weight` counts what admitted workloads hold idle in the fair share
    (quota.QuotaBook); `feasibility` says which flavors' nodes could ever host the pods; a
    workload whose `requeue_at` is after `now` waits out its backoff; `starving_after_s` is the
    starvation bound (None: none, as Kueue)."""
    book = QuotaBook(cluster_queues, cohorts=cohorts, idle_weight=idle_weight)
    lqs = {lq.key: lq for lq in local_queues}
    result = CycleResult()
    held: dict[str, AdmittedWorkload] = {}
    for a in admitted:
        eviction = _must_go(a, book, lqs)
        if eviction is not None:
            result.evictions.append(eviction)
        elif a.cluster_queue in book.queues:
            held[a.key] = a
            book.charge(a.cluster_queue, a.usage)
            book.charge_idle(a.cluster_queue, a.idle)

    queued: list[QueuedWorkload] = []
    for w in pending:
        refusal = _inadmissible(w, book, lqs, now)
        if refusal is None:
            queued.append(w)
        else:
            result.waiting[w.key] = Waiting(w, refusal[0], refusal[1], 0)
    orders = queue_orders(book, queued, list(held.values()), lqs, fair_usage)
    position = {w.key: k for o in orders.values() for k, w in enumerate(o.full_order(), start=1)}
    serving: dict[str, QueueOrder] = dict(orders)
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

    while serving and (limit is None or len(result.admitted) < limit):
        heads: list[tuple[QueuedWorkload, Nomination]] = []
        starving: list[QueuedWorkload] = []  # heads past the bound that found no quota
        for name in list(serving):
            order = serving[name]
            head = order.head()
            if head is None:
                del serving[name]
                continue
            nomination = nominations.get(name)
            if nomination is None:
                signature = _signature(head, book.queues[name])
                amounts = head.demand.amounts(book.queues[name].covered)
                candidates = [a for a in held.values() if a.key not in admitted_now]
                nomination = _known_failure(failed[name], signature, amounts) or nominate(
                    book, flavors, head, candidates, feasibility
                )
                nominations[name] = nomination
                # What no node can host is no bound on larger workloads of smaller pods.
                if (
                    not nomination.admissible
                    and signature is not None
                    and nomination.reason != INADMISSIBLE
                ):
                    failed[name].append((signature, amounts, nomination))
            if nomination.admissible:
                heads.append((head, nomination))
                continue
            wait(head, nomination.reason, nomination.message)
            nominations.pop(name, None)
            order.pop(admitted=False)
            if (
                starving_after_s is not None
                and nomination.reason == WAITING_FOR_QUOTA
                and now - head.created_at >= starving_after_s
            ):
                starving.append(head)
            if book.queues[name].queueing_strategy is QueueingStrategy.STRICT_FIFO:
                for behind in order.full_order():
                    wait(
                        behind,
                        WAITING_FOR_QUOTA,
                        f"StrictFIFO: waiting behind {head.shown()} at the head of "
                        f"ClusterQueue {name}",
                    )
                del serving[name]
        if starving:
            oldest = min(starving, key=lambda w: (w.created_at, w.key))
            for name in book.members(oldest.cluster_queue):
                for behind in serving.pop(name).full_order() if name in serving else ():
                    wait(
                        behind,
                        WAITING_FOR_QUOTA,
                        f"waiting behind {oldest.shown()}, which has waited past the "
                        f"starvation bound ({starving_after_s:g} s) for quota",
                    )
            heads = [h for h in heads if h[0].cluster_queue in serving]
        if not heads:
            continue
        head, nomination = pick_head(book, heads)
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
        serving[head.cluster_queue].pop(admitted=True)
        # Every queue sharing quota with a changed one must nominate again.
        stale = {m for cq in touched for m in book.members(cq)}
        for name in stale:
            nominations.pop(name, None)
    for order in serving.values():
        for w in order.full_order():
            if w.key not in result.waiting:
                wait(w, WAITING_FOR_QUOTA, "not considered in this cycle")
    return result


def _must_go(
    a: AdmittedWorkload, book: QuotaBook, lqs: Mapping[str, LocalQueue]
) -> Eviction | None:
    if not a.active:
        return Eviction(a.key, INACTIVE_WORKLOAD, "the workload is deactivated (active: false)")
    cq = book.queues.get(a.cluster_queue)
    if cq is not None and cq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
        return Eviction(
            a.key, CLUSTER_QUEUE_STOPPED, f"ClusterQueue {cq.name} is stopped (HoldAndDrain)"
        )
    lq = lqs.get(a.local_queue)
    if lq is not None and lq.stop_policy is StopPolicy.HOLD_AND_DRAIN:
        return Eviction(
            a.key, LOCAL_QUEUE_STOPPED, f"LocalQueue {lq.key} is stopped (HoldAndDrain)"
        )
    return None


def _inadmissible(
    w: QueuedWorkload, book: QuotaBook, lqs: Mapping[str, LocalQueue], now: float
) -> tuple[str, str] | None:
    """Why `w` cannot even be queued now (reason, message), or None."""
    if not w.active:
        return INACTIVE_WORKLOAD, "the workload is deactivated (active: false)"
    if w.requeue_at > now:
        return (
            PODS_READY_TIMEOUT,
            f"evicted: its pods were not ready in time; requeued in {w.requeue_at - now:.0f}s "
            "(backoff)",
        )
    cq = book.queues.get(w.cluster_queue)
    if cq is None:
        return INADMISSIBLE, f"ClusterQueue {w.cluster_queue} does not exist"
    if cq.stop_policy is not StopPolicy.NONE:
        return INADMISSIBLE, f"ClusterQueue {cq.name} is stopped ({cq.stop_policy.value})"
    lq = lqs.get(w.local_queue)
    if lq is not None and lq.stop_policy is not StopPolicy.NONE:
        return INADMISSIBLE, f"LocalQueue {lq.key} is stopped ({lq.stop_policy.value})"
    if not cq.namespace_selector.admits(w.namespace):
        return (
            INADMISSIBLE,
            f"namespace {w.namespace} is not selected by ClusterQueue {cq.name}'s "
            "namespaceSelector",
        )
    return None


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
        workload.tolerations,
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
