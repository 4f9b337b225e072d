"""Reads for the REST API (HackSoft selectors): tenant-scoped workload queries, placements,
pending status, quota and usage, flavors and free capacity, nodes and tenants.

Several answers are derived from what scheduling stores today and will read the queue models of
issue 7 when they land (ClusterQueue / LocalQueue / ResourceFlavor / PriorityClass rows and the
queue's own position and reason selectors); each such place says so.
"""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from api import quantities as q
from api.exceptions import NotFound
from api.models import ApiToken, TenantPolicy
from api.specs import ClusterLimits, Limits, ModelInfo
from scheduling import selectors as scheduling_selectors
from scheduling import why_pending
from scheduling.core.efficiency import Advice
from scheduling.core.queueing.resources import Demand
from scheduling.core.types import GPU_RESOURCE, MILLI_PER_GPU, PodRequest, SharingMode
from scheduling.efficiency import efficiency_of, tenant_minutes, workload_advice
from scheduling.models import (
    Allocation,
    ClusterQueue,
    Gpu,
    GpuAssignment,
    LocalQueue,
    Node,
    PlacementDecision,
    Pod,
    PriorityClass,
    ResourceFlavor,
    Tenant,
    Workload,
)
from telemetry.selectors import UsagePoint

DEFAULT_QUEUE = "default"
PRODUCT_LABEL = "nvidia.com/gpu.product"

# --- tenants, their policy and queues -------------------------------------------------------


def tenant_policy(tenant: Tenant) -> TenantPolicy | None:
    return TenantPolicy.objects.filter(tenant=tenant).first()


def tenant_queue_names(tenant: Tenant, policy: TenantPolicy | None = None) -> list[str]:
    """The queues the tenant may submit to: the LocalQueues of its namespace, the policy's queue
    first. A tenant without LocalQueues (made before queues existed) has its policy's queue, else
    Workload's default queue."""
    policy = policy if policy is not None else tenant_policy(tenant)
    names = sorted(
        LocalQueue.objects.filter(namespace=tenant.namespace).values_list("name", flat=True)
    )
    if policy is not None and policy.queue_name in names:
        names.remove(policy.queue_name)
        names.insert(0, policy.queue_name)
    if names:
        return names
    return [policy.queue_name] if policy is not None else [DEFAULT_QUEUE]


def limits_of(policy: TenantPolicy | None) -> Limits:
    if policy is None:
        return Limits()

    def amounts(doc: Mapping[str, str]) -> dict[str, int]:
        return {resource: q.pod_amount(resource, value) for resource, value in doc.items()}

    return Limits(
        default_requests=amounts(policy.default_requests),
        min_per_pod=amounts(policy.min_per_pod),
        max_per_pod=amounts(policy.max_per_pod),
        text={
            "defaultRequests": dict(policy.default_requests),
            "minPerPod": dict(policy.min_per_pod),
            "maxPerPod": dict(policy.max_per_pod),
        },
    )


def tenant_get(name: str) -> Tenant:
    tenant = Tenant.objects.filter(name=name).first()
    if tenant is None:
        raise NotFound(f"tenant {name!r} not found")
    return tenant


@dataclass(frozen=True)
class TenantSummary:
    tenant: Tenant
    policy: TenantPolicy | None
    queue_names: list[str]
    active_workloads: int
    tokens: int


def tenants_list() -> list[TenantSummary]:
    active = dict(
        Workload.objects.filter(state__in=Workload.ACTIVE_STATES)
        .values_list("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    )
    tokens = dict(
        ApiToken.objects.filter(tenant__isnull=False, revoked_at__isnull=True)
        .values_list("tenant_id")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "n")
    )
    policies = {p.tenant_id: p for p in TenantPolicy.objects.all()}
    return [
        TenantSummary(
            tenant=t,
            policy=policies.get(t.pk),
            queue_names=tenant_queue_names(t, policies.get(t.pk)),
            active_workloads=active.get(t.pk, 0),
            tokens=tokens.get(t.pk, 0),
        )
        for t in Tenant.objects.order_by("name")
    ]


def tenant_summary(tenant: Tenant) -> TenantSummary:
    policy = tenant_policy(tenant)
    return TenantSummary(
        tenant=tenant,
        policy=policy,
        queue_names=tenant_queue_names(tenant, policy),
        active_workloads=tenant.workloads.filter(state__in=Workload.ACTIVE_STATES).count(),
        tokens=ApiToken.objects.filter(tenant=tenant, revoked_at__isnull=True).count(),
    )


def tenant_tokens(tenant: Tenant) -> list[ApiToken]:
    return list(ApiToken.objects.filter(tenant=tenant).order_by("id"))


# --- the cluster's limits (what the largest node can offer) ------------------------------------

_limits_lock = threading.Lock()
_limits_cache: dict[tuple[Any, ...], ClusterLimits] = {}


def cluster_limits() -> ClusterLimits:
    """Per GPU model: most GPUs on one node, MIG profiles, sharing; the largest CPU and memory.
    Recomputed only when a node is registered or changed (keyed by count and last update)."""
    stamp = Node.objects.aggregate(n=Count("id"), changed=Max("updated_at"))
    key = (stamp["n"], stamp["changed"])
    with _limits_lock:
        cached = _limits_cache.get(key)
    if cached is not None:
        return cached
    largest = Node.objects.aggregate(cpu=Max("cpu_milli"), memory=Max("memory_mib"))
    per_node = (
        Gpu.objects.values("node_id", "model").annotate(n=Count("id")).values_list("model", "n")
    )
    most: dict[str, int] = defaultdict(int)
    for model, n in per_node:
        most[model] = max(most[model], n)
    mig: dict[str, set[str]] = defaultdict(set)
    shareable: set[str] = set()
    shareable_modes = [m.value for m in SharingMode if m.shareable]
    for model, layout in (
        Gpu.objects.filter(sharing=SharingMode.MIG.value)
        .values_list("model", "mig_layout")
        .distinct()
    ):
        mig[model].update(str(p) for p in layout)
    shareable.update(
        Gpu.objects.filter(sharing__in=shareable_modes).values_list("model", flat=True).distinct()
    )
    limits = ClusterLimits(
        models={
            model: ModelInfo(n, frozenset(mig.get(model, ())), model in shareable)
            for model, n in most.items()
        },
        max_cpu_milli=largest["cpu"] or 0,
        max_memory_mib=largest["memory"] or 0,
        nodes=stamp["n"],
    )
    with _limits_lock:
        _limits_cache.clear()
        _limits_cache[key] = limits
    return limits


# --- workloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadFilters:
    states: Sequence[str] = ()
    queue_name: str | None = None
    priority_class_name: str | None = None
    service_class: str | None = None
    name_prefix: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


def workloads_of(tenant: Tenant, filters: WorkloadFilters | None = None) -> QuerySet[Workload]:
    """The tenant's workloads, newest first (ordered by id, which the cursor pages on)."""
    qs = Workload.objects.filter(tenant=tenant)
    f = filters or WorkloadFilters()
    if f.states:
        qs = qs.filter(state__in=list(f.states))
    if f.queue_name:
        qs = qs.filter(queue_name=f.queue_name)
    if f.priority_class_name:
        qs = qs.filter(priority_class_name=f.priority_class_name)
    if f.service_class:
        qs = qs.filter(service_class=f.service_class)
    if f.name_prefix:
        qs = qs.filter(name__startswith=f.name_prefix)
    if f.created_after:
        qs = qs.filter(created_at__gte=f.created_after)
    if f.created_before:
        qs = qs.filter(created_at__lt=f.created_before)
    return qs.order_by("-id")


def workload_get(tenant: Tenant, name: str) -> Workload:
    """The tenant's workload; another tenant's is as absent as a missing one (404, never 403)."""
    workload = Workload.objects.filter(tenant=tenant, name=name).select_related("tenant").first()
    if workload is None:
        raise NotFound(f"workload {name!r} not found")
    return workload


def pod_phase_counts(workload_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    rows = (
        Pod.objects.filter(workload_id__in=list(workload_ids))
        .values_list("workload_id", "phase")
        .annotate(n=Count("id"))
        .values_list("workload_id", "phase", "n")
    )
    for workload_id, phase, n in rows:
        counts[workload_id][phase] = n
    return counts


# --- pods and placements ------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuHeld:
    index: int
    uuid: str
    model: str
    milli: int
    mig_slot: int | None


@dataclass(frozen=True)
class PodView:
    pod: Pod
    node: str | None
    allocation_state: str | None
    scope: str | None
    gpus: list[GpuHeld] = field(default_factory=list)


def workload_pods(workload: Workload) -> list[PodView]:
    """Every pod with where it runs (its active allocation, else its last released one)."""
    pods = list(workload.pods.order_by("pod_set", "id"))
    allocations: dict[int, Allocation] = {}
    for allocation in (
        Allocation.objects.filter(pod__workload=workload)
        .select_related("node")
        .order_by("pod_id", "-active", "-id")
    ):
        allocations.setdefault(allocation.pod_id, allocation)
    held: dict[int, list[GpuHeld]] = defaultdict(list)
    for a in (
        GpuAssignment.objects.filter(allocation_id__in=[a.pk for a in allocations.values()])
        .select_related("gpu")
        .order_by("gpu__index", "mig_slot")
    ):
        held[a.allocation_id].append(
            GpuHeld(a.gpu.index, a.gpu.uuid, a.gpu.model, a.milli, a.mig_slot)
        )
    views = []
    for pod in pods:
        held_by = allocations.get(pod.pk)
        views.append(
            PodView(
                pod=pod,
                node=held_by.node.name if held_by else None,
                allocation_state=held_by.state if held_by else None,
                scope=(held_by.scope or None) if held_by else None,
                gpus=held.get(held_by.pk, []) if held_by else [],
            )
        )
    return views


def workload_decisions(workload: Workload, limit: int = 50) -> list[PlacementDecision]:
    """The newest placement decisions of the workload's pods (the scheduler keeps a bounded
    number of them overall, so old ones may be gone)."""
    return list(
        PlacementDecision.objects.filter(pod__workload=workload)
        .select_related("pod")
        .order_by("-id")[:limit]
    )


# --- pending status -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReasonCount:
    reason: str
    nodes: int


@dataclass(frozen=True)
class PendingStatus:
    workload: Workload
    waiting: bool
    position: int | None  # 1 = next; None when not waiting
    reason: str | None
    message: str
    pods_pending: int
    attempts: int
    last_attempt_at: datetime | None
    nodes: int | None
    feasible_nodes: int | None
    reasons: list[ReasonCount]
    last_decision: dict[str, Any] | None
    estimated_start: datetime | None
    cluster_queue: str | None = None
    local_queue: str = ""


def workload_pending_status(workload: Workload, now: datetime | None = None) -> PendingStatus:
    """Why the workload waits and when it may start: position, reason, message and estimated start
    come from the queue (scheduling.selectors.pending_workloads: its cluster queue's order while
    waiting for quota, the order of admitted workloads while waiting for nodes); the per-filter
    node counts come from the structured explanation of the pods' last scheduling attempt
    (scheduling.why_pending, the read the dashboard uses too) and the last decision from its
    record."""
    now = now or timezone.now()
    pending = list(workload.pods.filter(phase=Pod.Phase.PENDING).order_by("-last_attempt_at"))
    queued = None
    if workload.state in Workload.ACTIVE_STATES and pending:
        for item in scheduling_selectors.pending_workloads(
            now, namespace=workload.tenant.namespace
        ):
            if item.workload.pk == workload.pk:
                queued = item
                break
    if queued is None:
        return PendingStatus(
            workload, False, None, None, "", len(pending), 0, None, None, None, [], None, None
        )
    tried = [p for p in pending if p.last_reason]
    latest = tried[0] if tried else None
    why = why_pending.of_pod(latest) if latest else None
    decision = (
        PlacementDecision.objects.filter(pod__in=pending).order_by("-id").first()
        if latest
        else None
    )
    return PendingStatus(
        workload=workload,
        waiting=True,
        position=queued.position or None,
        reason=queued.reason,
        message=queued.message,
        pods_pending=len(pending),
        attempts=max((p.attempts for p in pending), default=0),
        last_attempt_at=latest.last_attempt_at if latest else None,
        nodes=why.nodes if why else None,
        feasible_nodes=why.feasible if why else None,
        reasons=[ReasonCount(g.reason, g.nodes) for g in why.groups] if why else [],
        last_decision=decision.explanation if decision else None,
        estimated_start=queued.estimated_start,
        cluster_queue=queued.cluster_queue or None,
        local_queue=queued.local_queue,
    )


# --- quota and usage ------------------------------------------------------------------------------


def requests_in_use(tenant: Tenant) -> tuple[Demand, int]:
    """What the tenant's active pods request (ResourceQuota's `used`), and how many pods."""
    active = Pod.objects.filter(workload__tenant=tenant, phase__in=Pod.ACTIVE_PHASES)
    totals = active.aggregate(
        n=Count("id"),
        cpu=Sum("cpu_milli"),
        memory=Sum("memory_mib"),
        gpus=Sum("gpus"),
        milli=Sum("gpu_milli"),
    )
    mig = dict(
        active.filter(mig_count__gt=0)
        .values_list("mig_profile")
        .annotate(n=Sum("mig_count"))
        .values_list("mig_profile", "n")
    )
    demand = Demand(
        cpu_milli=totals["cpu"] or 0,
        memory_mib=totals["memory"] or 0,
        gpu_milli=(totals["gpus"] or 0) * MILLI_PER_GPU + (totals["milli"] or 0),
        mig=mig,
    )
    return demand, totals["n"] or 0


def demand_amounts(demand: Demand, pods: int, covered: Iterable[str]) -> dict[str, int]:
    """Canonical amounts per quota resource: MIG counts as its own resource when the quota names
    it, else as GPU slices under nvidia.com/gpu (as issue 7's quota book counts it)."""
    amounts = demand.amounts(covered)
    amounts[q.PODS] = pods
    return amounts


def pod_request_of(template: Any, uid: str = "template") -> PodRequest:
    return PodRequest(
        uid=uid,
        cpu_milli=template.cpu_milli,
        memory_mib=template.memory_mib,
        gpus=template.gpus,
        gpu_milli=template.gpu_milli,
        mig_profile=template.mig_profile,
        mig_count=template.mig_count,
    )


def format_amount(resource: str, amount: int) -> str:
    """A canonical amount as a Kubernetes quantity string."""
    if resource == q.CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if resource == q.MEMORY:
        if amount and amount % 1024 == 0:
            return f"{amount // 1024}Gi"
        return f"{amount}Mi"
    if resource == GPU_RESOURCE:
        return f"{amount / MILLI_PER_GPU:g}"
    return str(amount)


@dataclass(frozen=True)
class QuotaView:
    tenant: Tenant
    queue_names: list[str]
    hard: dict[str, str]
    used: dict[str, str]
    limits: dict[str, dict[str, str]]


def tenant_quota(tenant: Tenant) -> QuotaView:
    """ResourceQuota-shaped: the hard caps and what the tenant's active pods request now. Until
    the ClusterQueue models of issue 7 land there is no nominal quota to show."""
    policy = tenant_policy(tenant)
    hard = dict(policy.hard) if policy else {}
    demand, pods = requests_in_use(tenant)
    amounts = demand_amounts(demand, pods, hard)
    shown = [q.CPU, q.MEMORY, GPU_RESOURCE, q.PODS, *sorted(r for r in hard if r not in amounts)]
    shown += sorted(r for r in amounts if r not in shown)
    return QuotaView(
        tenant=tenant,
        queue_names=tenant_queue_names(tenant, policy),
        hard=hard,
        used={r: format_amount(r, amounts.get(r, 0)) for r in shown},
        limits={
            "defaultRequests": dict(policy.default_requests) if policy else {},
            "minPerPod": dict(policy.min_per_pod) if policy else {},
            "maxPerPod": dict(policy.max_per_pod) if policy else {},
        },
    )


@dataclass(frozen=True)
class WorkloadAdviceView:
    workload: str
    pods: int
    advice: Advice


@dataclass(frozen=True)
class UsageView:
    tenant: Tenant
    window: timedelta
    requested_gpus: float
    used_p95_gpus: float | None
    over_request: float | None
    usage_ratio: float
    advice: list[WorkloadAdviceView]
    series: list[UsagePoint]


def tenant_usage(tenant: Tenant, window: timedelta, now: datetime | None = None) -> UsageView:
    """Held vs DCGM-busy GPUs over `window`, the overRequest index, right-sizing advice per
    workload and the per-minute series: one definition (scheduling.efficiency), the same the
    dashboard's Tenants page shows."""
    now = now or timezone.now()
    series = tenant_minutes(start=now - window, end=now, tenant=tenant.name).get(tenant.name, [])
    efficiency = efficiency_of(series, tenant.name)
    advice = [
        WorkloadAdviceView(a.workload, a.pods, a.advice)
        for a in workload_advice(window=window, now=now, tenant=tenant.name)
    ]
    return UsageView(
        tenant=tenant,
        window=window,
        requested_gpus=efficiency.requested_gpus,
        used_p95_gpus=efficiency.used_p95_gpus,
        over_request=efficiency.over_request,
        usage_ratio=efficiency.usage_ratio,
        advice=advice,
        series=series,
    )


# --- flavors and free capacity ----------------------------------------------------------------


def flavor_name(model: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "gpu"


@dataclass(frozen=True)
class FlavorView:
    name: str
    gpu_model: str
    node_labels: dict[str, str]
    nodes: int
    cordoned_nodes: int
    gpus: int
    gpus_free: int  # whole GPUs nobody holds, on schedulable nodes
    largest_free_block: int  # most free whole GPUs on one schedulable node
    shared_milli_free: int  # spare milli on shared (time-slicing / MPS) GPUs, schedulable nodes
    mig_gpus: int


@dataclass
class _NodeCapacity:
    labels: dict[str, str]
    cordoned: bool
    model: str
    gpus: int = 0
    free: int = 0  # whole GPUs nobody holds
    shared_free_milli: int = 0
    mig: int = 0


def _node_capacity() -> list[_NodeCapacity]:
    busy_mig = GpuAssignment.objects.filter(gpu=OuterRef("pk"), active=True)
    shareable = [m.value for m in SharingMode if m.shareable]
    stats = {
        row["node_id"]: row
        for row in Gpu.objects.annotate(mig_busy=Exists(busy_mig))
        .values("node_id")
        .annotate(
            n=Count("id"),
            free=Count("id", filter=Q(used_milli=0, mig_busy=False)),
            mig=Count("id", filter=Q(sharing=SharingMode.MIG.value)),
            shared_n=Count("id", filter=Q(sharing__in=shareable)),
            shared_used=Sum("used_milli", filter=Q(sharing__in=shareable)),
            model=Max("model"),
        )
    }
    out = []
    for node_id, labels, cordoned in Node.objects.values_list("id", "labels", "cordoned"):
        row = stats.get(node_id)
        if row is None:
            out.append(_NodeCapacity(dict(labels), cordoned, ""))
            continue
        out.append(
            _NodeCapacity(
                labels=dict(labels),
                cordoned=cordoned,
                model=row["model"],
                gpus=row["n"],
                free=row["free"],
                shared_free_milli=row["shared_n"] * MILLI_PER_GPU - (row["shared_used"] or 0),
                mig=row["mig"],
            )
        )
    return out


def _flavor_view(
    name: str, model: str, labels: dict[str, str], nodes: list[_NodeCapacity]
) -> FlavorView:
    schedulable = [n for n in nodes if not n.cordoned]
    return FlavorView(
        name=name,
        gpu_model=model,
        node_labels=labels,
        nodes=len(nodes),
        cordoned_nodes=len(nodes) - len(schedulable),
        gpus=sum(n.gpus for n in nodes),
        gpus_free=sum(n.free for n in schedulable),
        largest_free_block=max((n.free for n in schedulable), default=0),
        shared_milli_free=sum(n.shared_free_milli for n in schedulable),
        mig_gpus=sum(n.mig for n in nodes),
    )


def by_gpu_model(nodes: list[_NodeCapacity] | None = None) -> list[FlavorView]:
    """Capacity per GPU model (nodes labelled nvidia.com/gpu.product)."""
    by_model: dict[str, list[_NodeCapacity]] = defaultdict(list)
    for n in nodes if nodes is not None else _node_capacity():
        if n.model:
            by_model[n.model].append(n)
    return [
        _flavor_view(flavor_name(model), model, {PRODUCT_LABEL: model}, members)
        for model, members in sorted(by_model.items())
    ]


def flavors(nodes: list[_NodeCapacity] | None = None) -> list[FlavorView]:
    """The cluster's ResourceFlavors with the capacity of the nodes they select (all node labels
    match). Without ResourceFlavor rows, one flavor per GPU model."""
    nodes = nodes if nodes is not None else _node_capacity()
    rows = list(ResourceFlavor.objects.order_by("name"))
    if rows:
        out = []
        for flavor in rows:
            labels = {str(k): str(v) for k, v in flavor.node_labels.items()}
            members = [n for n in nodes if all(n.labels.get(k) == v for k, v in labels.items())]
            models = sorted({n.model for n in members if n.model})
            out.append(_flavor_view(flavor.name, ",".join(models), labels, members))
        return out
    return by_gpu_model(nodes)


@dataclass(frozen=True)
class CapacityView:
    nodes: int
    schedulable_nodes: int
    cpu_milli_free: int
    memory_mib_free: int
    flavors: list[FlavorView]
    gpu_models: list[FlavorView]


def capacity() -> CapacityView:
    nodes = _node_capacity()
    schedulable = Node.objects.filter(cordoned=False)
    free = schedulable.aggregate(
        cpu=Sum("cpu_milli"),
        cpu_used=Sum("cpu_used_milli"),
        memory=Sum("memory_mib"),
        memory_used=Sum("memory_used_mib"),
    )
    return CapacityView(
        nodes=Node.objects.count(),
        schedulable_nodes=schedulable.count(),
        cpu_milli_free=(free["cpu"] or 0) - (free["cpu_used"] or 0),
        memory_mib_free=(free["memory"] or 0) - (free["memory_used"] or 0),
        flavors=flavors(nodes),
        gpu_models=by_gpu_model(nodes),
    )


# --- nodes --------------------------------------------------------------------------------------


def nodes_query(*, cordoned: bool | None = None, gpu_model: str | None = None) -> QuerySet[Node]:
    qs = Node.objects.all()
    if cordoned is not None:
        qs = qs.filter(cordoned=cordoned)
    if gpu_model:
        qs = qs.filter(gpus__model=gpu_model).distinct()
    return qs.order_by("name")


def node_get(name: str) -> Node:
    node = Node.objects.filter(name=name).first()
    if node is None:
        raise NotFound(f"node {name!r} not found")
    return node


def node_gpus(nodes: Sequence[Node]) -> dict[int, list[Gpu]]:
    out: dict[int, list[Gpu]] = defaultdict(list)
    for gpu in Gpu.objects.filter(node__in=list(nodes)).order_by("node_id", "index"):
        out[gpu.node_id].append(gpu)
    return out


def workloads_on_node(node: Node) -> list[Workload]:
    """Active workloads holding (or reserving) anything on the node."""
    ids = (
        Allocation.objects.filter(node=node, active=True)
        .values_list("pod__workload_id", flat=True)
        .distinct()
    )
    return list(
        Workload.objects.filter(pk__in=list(ids), state__in=Workload.ACTIVE_STATES)
        .select_related("tenant")
        .order_by("id")
    )


# --- local queues (derived) -------------------------------------------------------------------


@dataclass(frozen=True)
class LocalQueueView:
    namespace: str
    tenant: str
    name: str
    cluster_queue: str | None  # None: no LocalQueue row of that name (workloads stay Inadmissible)
    pending: int
    admitted: int
    running: int


def local_queues(tenant: Tenant | None = None) -> list[LocalQueueView]:
    """Per tenant: its LocalQueues (and any other queue name its workloads use) with Kueue's
    status counts."""
    tenants = [tenant] if tenant is not None else list(Tenant.objects.order_by("name"))
    rows = LocalQueue.objects.select_related("cluster_queue")
    if tenant is not None:
        rows = rows.filter(namespace=tenant.namespace)
    targets = {(lq.namespace, lq.name): lq.cluster_queue.name for lq in rows}
    counts: dict[tuple[int, str], dict[str, int]] = defaultdict(dict)
    qs = Workload.objects.filter(state__in=Workload.ACTIVE_STATES)
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    for tenant_id, queue, state, n in (
        qs.values_list("tenant_id", "queue_name", "state")
        .annotate(n=Count("id"))
        .values_list("tenant_id", "queue_name", "state", "n")
    ):
        counts[(tenant_id, queue)][state] = n
    policies = {p.tenant_id: p for p in TenantPolicy.objects.filter(tenant__in=tenants)}
    out = []
    for t in tenants:
        names = set(tenant_queue_names(t, policies.get(t.pk)))
        names.update(name for (ns, name) in targets if ns == t.namespace)
        names.update(queue for (tid, queue) in counts if tid == t.pk)
        for name in sorted(names):
            c = counts.get((t.pk, name), {})
            out.append(
                LocalQueueView(
                    namespace=t.namespace,
                    tenant=t.name,
                    name=name,
                    cluster_queue=targets.get((t.namespace, name)),
                    pending=c.get(Workload.State.PENDING, 0),
                    admitted=c.get(Workload.State.ADMITTED, 0),
                    running=c.get(Workload.State.RUNNING, 0),
                )
            )
    return out


# --- cluster queues and priority classes (issue 7's models) -----------------------------------


def cluster_queues() -> list[
    tuple[ClusterQueue, scheduling_selectors.ClusterQueueStatus | None, list[str]]
]:
    """Each ClusterQueue row with its Kueue-like status (scheduling.selectors) and its
    LocalQueues ("namespace/name")."""
    status = {s.name: s for s in scheduling_selectors.cluster_queue_status()}
    locals_of: dict[int, list[str]] = defaultdict(list)
    for lq in LocalQueue.objects.order_by("namespace", "name"):
        locals_of[lq.cluster_queue_id].append(f"{lq.namespace}/{lq.name}")
    return [
        (cq, status.get(cq.name), locals_of.get(cq.pk, []))
        for cq in ClusterQueue.objects.order_by("name")
    ]


def priority_classes() -> list[PriorityClass]:
    return list(PriorityClass.objects.order_by("-value", "name"))
