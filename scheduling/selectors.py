"""Reads for pages, the API and the admission cycle: queue setup, queued and admitted workloads,
cluster queue status, pending workloads. (The scheduler's snapshot is read by cluster_state.)"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from django.conf import settings

from scheduling.cluster_state import tolerations_from_json
from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing import ordering
from scheduling.core.queueing.admission import QueuedWorkload
from scheduling.core.queueing.config import (
    AdmissionFairSharing,
    AdmissionMode,
    BorrowWithinCohortPolicy,
    FlavorQuotas,
    FungibilityPolicy,
    NamespaceSelector,
    Preemption,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    WithinClusterQueue,
)
from scheduling.core.queueing.config import ClusterQueue as ClusterQueueSpec
from scheduling.core.queueing.config import Cohort as CohortSpec
from scheduling.core.queueing.config import LocalQueue as LocalQueueSpec
from scheduling.core.queueing.config import ResourceFlavor as ResourceFlavorSpec
from scheduling.core.queueing.fair_usage import (
    FairUsageState,
)
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import FlavorResource, QuotaBook
from scheduling.core.queueing.resources import GPU, Demand, format_quantity
from scheduling.core.types import (
    PodRequest,
    ServiceClass,
    Taint,
    TaintEffect,
    Toleration,
)
from scheduling.efficiency import usage_ratios
from scheduling.models import (
    AdmissionFairSharingSettings,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Pod,
    ResourceFlavor,
    Workload,
)

# --- queues -------------------------------------------------------------------------------------


@dataclass
class QueueSetup:
    """The queue configuration as the core reads it."""

    cluster_queues: dict[str, ClusterQueueSpec] = field(default_factory=dict)
    rows: dict[str, ClusterQueue] = field(default_factory=dict)
    flavors: dict[str, ResourceFlavorSpec] = field(default_factory=dict)
    local_queues: dict[str, LocalQueueSpec] = field(default_factory=dict)  # "namespace/name"
    cohorts: dict[str, CohortSpec] = field(default_factory=dict)
    fair_usage: FairUsageState = field(default_factory=FairUsageState)

    @property
    def managed(self) -> bool:
        """Without any cluster queue, workloads are admitted as they come (no quotas)."""
        return bool(self.cluster_queues)


def queue_setup() -> QueueSetup:
    rows = {row.name: row for row in ClusterQueue.objects.all()}
    lq_rows = list(LocalQueue.objects.select_related("cluster_queue"))
    return QueueSetup(
        cluster_queues={name: cluster_queue_spec(row) for name, row in rows.items()},
        rows=rows,
        flavors={row.name: flavor_spec(row) for row in ResourceFlavor.objects.all()},
        local_queues={
            f"{lq.namespace}/{lq.name}": LocalQueueSpec(
                lq.namespace,
                lq.name,
                lq.cluster_queue.name,
                lq.fair_sharing_weight,
                StopPolicy(lq.stop_policy),
            )
            for lq in lq_rows
        },
        cohorts={row.name: cohort_spec(row) for row in Cohort.objects.all()},
        fair_usage=FairUsageState(
            fair_sharing_settings(),
            {
                f"{lq.namespace}/{lq.name}": MappingProxyType(dict(lq.consumed_resources))
                for lq in lq_rows
                if lq.consumed_resources
            },
        ),
    )


def resource_groups_spec(docs: Iterable[Mapping[str, Any]]) -> tuple[ResourceGroup, ...]:
    """models.ClusterQueue.resource_groups (and Cohort's) as the core's resource groups."""
    return tuple(
        ResourceGroup(
            tuple(group["coveredResources"]),
            tuple(
                FlavorQuotas(
                    fq["name"],
                    MappingProxyType(
                        {
                            r["name"]: ResourceQuota(
                                int(r["nominalQuota"]),
                                r.get("borrowingLimit"),
                                r.get("lendingLimit"),
                            )
                            for r in fq["resources"]
                        }
                    ),
                )
                for fq in group["flavors"]
            ),
        )
        for group in docs
    )


def cluster_queue_spec(row: ClusterQueue) -> ClusterQueueSpec:
    return ClusterQueueSpec(
        name=row.name,
        cohort=row.cohort,
        resource_groups=resource_groups_spec(row.resource_groups),
        queueing_strategy=QueueingStrategy(row.queueing_strategy),
        preemption=Preemption(
            WithinClusterQueue(row.within_cluster_queue),
            ReclaimWithinCohort(row.reclaim_within_cohort),
            BorrowWithinCohortPolicy(row.borrow_within_cohort),
            row.borrow_max_priority_threshold,
        ),
        weight=row.fair_sharing_weight,
        admission_mode=AdmissionMode(row.admission_mode),
        stop_policy=StopPolicy(row.stop_policy),
        namespace_selector=NamespaceSelector(
            tuple((str(op), frozenset(values)) for op, values in row.namespace_selector or [])
        ),
        when_can_borrow=FungibilityPolicy(row.when_can_borrow),
    )


def cohort_spec(row: Cohort) -> CohortSpec:
    return CohortSpec(
        row.name,
        row.parent_name,
        resource_groups_spec(row.resource_groups),
        row.fair_sharing_weight,
    )


def fair_sharing_settings() -> AdmissionFairSharing:
    """Kueue's admissionFairSharing as applied (a Configuration document), else the defaults."""
    row = AdmissionFairSharingSettings.objects.first()
    if row is None:
        return AdmissionFairSharing()
    return AdmissionFairSharing(
        row.usage_half_life_s,
        row.usage_sampling_interval_s,
        MappingProxyType({str(k): float(v) for k, v in row.resource_weights.items()}),
    )


def flavor_spec(row: ResourceFlavor) -> ResourceFlavorSpec:
    return ResourceFlavorSpec(
        name=row.name,
        node_labels=MappingProxyType({str(k): str(v) for k, v in row.node_labels.items()}),
        node_taints=tuple(
            Taint(t["key"], t.get("value", ""), TaintEffect(t.get("effect", "NoSchedule")))
            for t in row.node_taints
        ),
        tolerations=tolerations_from_json(row.tolerations),
    )


def usage_key(fr: FlavorResource) -> str:
    return f"{fr[0]}|{fr[1]}"


def parse_usage(doc: Mapping[str, Any]) -> dict[FlavorResource, int]:
    out: dict[FlavorResource, int] = {}
    for key, amount in doc.items():
        flavor, _, resource = key.partition("|")
        out[(flavor, resource)] = int(amount)
    return out


@dataclass(frozen=True)
class _PodFacts:
    demand: Demand
    gpu_models: frozenset[str]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...] = ()


def _pod_facts(workload_ids: Iterable[int]) -> dict[int, _PodFacts]:
    """Per workload: the total its unfinished pods ask for, and the first pod's constraints."""
    templates: dict[int, list[tuple[PodRequest, int]]] = defaultdict(list)
    constraints: dict[int, tuple[frozenset[str], Mapping[str, str], tuple[Toleration, ...]]] = {}
    rows = Pod.objects.filter(
        workload_id__in=list(workload_ids), phase__in=Pod.ACTIVE_PHASES
    ).values_list(
        "workload_id",
        "cpu_milli",
        "memory_mib",
        "gpus",
        "gpu_milli",
        "mig_profile",
        "mig_count",
        "gpu_models",
        "node_selector",
        "extended_resources",
        "tolerations",
    )
    for wid, cpu, memory, gpus, milli, profile, mig, models, selector, extended, tols in rows:
        request = PodRequest(
            uid="",
            cpu_milli=cpu,
            memory_mib=memory,
            gpus=gpus,
            gpu_milli=milli,
            mig_profile=profile,
            mig_count=mig,
            extended=MappingProxyType(dict(extended or {})),
        )
        templates[wid].append((request, 1))
        if wid not in constraints:
            constraints[wid] = (frozenset(models), dict(selector), tolerations_from_json(tols))
    return {
        wid: _PodFacts(Demand.of_pods(pods), *constraints[wid]) for wid, pods in templates.items()
    }


def queued_workloads(
    setup: QueueSetup, *, limit: int | None = None
) -> list[tuple[Workload, QueuedWorkload | None]]:
    """Pending workloads (highest priority first, then oldest) as the admission cycle reads them;
    None for a workload whose LocalQueue does not exist."""
    query = (
        Workload.objects.filter(state=Workload.State.PENDING)
        .select_related("tenant")
        .order_by("-priority", "created_at", "id")
    )
    rows = list(query[:limit] if limit else query)
    facts = _pod_facts(w.pk for w in rows)
    out: list[tuple[Workload, QueuedWorkload | None]] = []
    for w in rows:
        key = f"{w.tenant.namespace}/{w.queue_name}"
        lq = setup.local_queues.get(key)
        fact = facts.get(w.pk) or _PodFacts(Demand(), frozenset(), {})
        out.append(
            (
                w,
                None
                if lq is None
                else QueuedWorkload(
                    key=str(w.pk),
                    cluster_queue=lq.cluster_queue,
                    local_queue=key,
                    priority=w.priority,
                    service_class=ServiceClass(w.service_class),
                    created_at=w.created_at.timestamp(),
                    demand=fact.demand,
                    gpu_models=fact.gpu_models,
                    node_selector=MappingProxyType(dict(fact.node_selector)),
                    can_preempt=w.preemption_policy != "Never",
                    tolerations=fact.tolerations,
                    active=w.active,
                ),
            )
        )
    return out


def fair_share_idle_weight() -> float:
    """How much idle-held GPU counts in the fair share (scheduling.core.queueing.quota)."""
    return float(getattr(settings, "FAIR_SHARE_IDLE_WEIGHT", 1.0))


def admitted_workloads(usage_ratios: Mapping[str, float] | None = None) -> list[AdmittedWorkload]:
    """Every workload holding quota; with tenants' usage ratios (p95 used / requested), what each
    holds idle: its GPU quota usage times (1 - its tenant's ratio)."""
    ratios = usage_ratios or {}
    rows = (
        Workload.objects.filter(
            state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
            cluster_queue__isnull=False,
        )
        .select_related("cluster_queue", "tenant")
        .order_by("admitted_at", "id")
    )
    admitted = []
    for w in rows:
        usage = parse_usage(w.quota_usage)
        admitted.append(
            AdmittedWorkload(
                key=str(w.pk),
                cluster_queue=w.cluster_queue.name if w.cluster_queue else "",
                priority=w.priority,
                service_class=ServiceClass(w.service_class),
                created_at=w.created_at.timestamp(),
                admitted_at=w.admitted_at.timestamp() if w.admitted_at else 0.0,
                usage=MappingProxyType(usage),
                local_queue=f"{w.tenant.namespace}/{w.queue_name}",
                idle=MappingProxyType(_idle(usage, ratios.get(w.tenant.name, 1.0))),
                active=w.active,
            )
        )
    return admitted


def _idle(usage: Mapping[FlavorResource, int], ratio: float) -> dict[FlavorResource, int]:
    return {fr: round(amount * (1.0 - ratio)) for fr, amount in usage.items() if fr[1] == GPU}


def quota_book(setup: QueueSetup, admitted: Sequence[AdmittedWorkload]) -> QuotaBook:
    book = QuotaBook(
        setup.cluster_queues.values(),
        cohorts=setup.cohorts.values(),
        idle_weight=fair_share_idle_weight(),
    )
    for a in admitted:
        if a.cluster_queue in book.queues:
            book.charge(a.cluster_queue, a.usage)
            book.charge_idle(a.cluster_queue, a.idle)
    return book


@dataclass(frozen=True)
class ResourceUsage:
    name: str
    nominal_quota: str
    borrowing_limit: str | None
    lending_limit: str | None
    total: str  # in use (Kueue's flavorsUsage.total)
    borrowed: str
    available: str  # what the queue could still take now, borrowing included


@dataclass(frozen=True)
class ClusterQueueStatus:
    name: str
    cohort: str
    queueing_strategy: str
    weight: float
    flavors_usage: list[tuple[str, list[ResourceUsage]]]
    pending_workloads: int
    admitted_workloads: int
    weighted_share: int  # Kueue's DRS (status.fairSharing.weightedShare)
    dominant_resource: str
    admission_mode: str = AdmissionMode.NONE.value
    stop_policy: str = StopPolicy.NONE.value
    cohort_path: tuple[str, ...] = ()  # its cohort, then each ancestor up to the root


def cluster_queue_status() -> list[ClusterQueueStatus]:
    """Each cluster queue's quota, use, borrowing and fair share, like Kueue's status."""
    setup = queue_setup()
    admitted = admitted_workloads(usage_ratios())
    book = quota_book(setup, admitted)
    pending: dict[str, int] = defaultdict(int)
    for _, queued in queued_workloads(setup):
        if queued is not None:
            pending[queued.cluster_queue] += 1
    holding: dict[str, int] = defaultdict(int)
    for a in admitted:
        holding[a.cluster_queue] += 1
    out = []
    for name, cq in sorted(setup.cluster_queues.items()):
        flavors: dict[str, list[ResourceUsage]] = {}
        for flavor, resource, quota in cq.flavor_resources():
            fr = (flavor, resource)

            def fmt(amount: int | None, resource: str = resource) -> str | None:
                return None if amount is None else format_quantity(resource, amount)

            flavors.setdefault(flavor, []).append(
                ResourceUsage(
                    name=resource,
                    nominal_quota=format_quantity(resource, quota.nominal),
                    borrowing_limit=fmt(quota.borrowing_limit),
                    lending_limit=fmt(quota.lending_limit),
                    total=format_quantity(resource, book.used(name, fr)),
                    borrowed=format_quantity(resource, book.borrowed(name, fr)),
                    available=format_quantity(resource, book.available(name, fr)),
                )
            )
        share, dominant = book.dominant_resource_share(name)
        out.append(
            ClusterQueueStatus(
                name=name,
                cohort=cq.cohort,
                queueing_strategy=cq.queueing_strategy.value,
                weight=cq.weight,
                flavors_usage=list(flavors.items()),
                pending_workloads=pending[name],
                admitted_workloads=holding[name],
                weighted_share=share,
                dominant_resource=dominant,
                admission_mode=cq.admission_mode.value,
                stop_policy=cq.stop_policy.value,
                cohort_path=tuple(book.cohort_chain(name)),
            )
        )
    return out


@dataclass(frozen=True)
class PendingWorkload:
    """Why a workload is not running yet, where it stands, and when it may start."""

    workload: Workload
    cluster_queue: str
    local_queue: str
    position: int  # 1-based: in its cluster queue (waiting for quota) or among admitted ones
    reason: str  # WaitingForQuota, NoFit, TopologyPlacementFailed, WaitingForGang, ...
    message: str
    estimated_start: datetime | None  # p50; None: unknown (Workload.start_unknown_reason)


def pending_workloads(
    now: datetime | None = None,
    *,
    namespace: str | None = None,
    cluster_queue: str | None = None,
) -> list[PendingWorkload]:
    """Every workload waiting for quota or for nodes, with its position in its queue, the reason
    and the estimated start the scheduling cycle last recorded (scheduling.estimates: the queue
    replayed with the real core against run times learnt from finished workloads)."""
    setup = queue_setup()
    admitted = admitted_workloads()
    book = quota_book(setup, admitted)
    queued = queued_workloads(setup)
    unplaced = list(
        Workload.objects.filter(state=Workload.State.ADMITTED, pods__phase=Pod.Phase.PENDING)
        .distinct()
        .select_related("tenant", "cluster_queue")
        .order_by("-priority", "created_at", "id")
    )
    out: list[PendingWorkload] = []
    positions = ordering.positions(queue_orders(setup, book, queued, admitted))
    for w, q in queued:
        if q is None:
            lq_key = f"{w.tenant.namespace}/{w.queue_name}"
            reason = w.pending_reason or queue_admission.INADMISSIBLE
            message = w.reason or f"LocalQueue {lq_key} does not exist"
            out.append(PendingWorkload(w, "", lq_key, 0, reason, message, None))
            continue
        out.append(
            PendingWorkload(
                w,
                q.cluster_queue,
                q.local_queue,
                positions.get(q.key, 0),
                w.pending_reason or queue_admission.WAITING_FOR_QUOTA,
                w.reason,
                w.start_p50,
            )
        )
    # Admitted, waiting for nodes.
    for k, w in enumerate(unplaced, start=1):
        out.append(
            PendingWorkload(
                w,
                w.cluster_queue.name if w.cluster_queue else "",
                f"{w.tenant.namespace}/{w.queue_name}",
                k,
                w.pending_reason or queue_admission.NO_FIT,
                w.reason,
                w.start_p50,
            )
        )
    if namespace is not None:
        out = [p for p in out if p.workload.tenant.namespace == namespace]
    if cluster_queue is not None:
        out = [p for p in out if p.cluster_queue == cluster_queue]
    return out


def queue_orders(
    setup: QueueSetup,
    book: QuotaBook,
    queued: Sequence[tuple[Workload, QueuedWorkload | None]],
    admitted: Sequence[AdmittedWorkload],
) -> dict[str, ordering.QueueOrder]:
    """Each cluster queue's pending workloads in the order the admission cycle serves them."""
    return ordering.queue_orders(
        book,
        [q for _, q in queued if q is not None and q.cluster_queue in book.queues and q.active],
        admitted,
        setup.local_queues,
        setup.fair_usage,
    )
