"""Reads that join allocations (what tenants hold) with telemetry (what their pods really use).

Requested GPUs over a window are the time-weighted average of the tenant's allocations; used GPUs
are the p95 of the tenant's per-minute DCGM busy sum. DCGM cannot split a time-sliced GPU between
the pods on it (it repeats the GPU's value once per pod), so a shared pod's reading is scaled by
its share of the milli allocated on that GPU.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from scheduling.core.efficiency import Advice, over_request, right_size, usage_ratio
from scheduling.core.types import MILLI_PER_GPU
from scheduling.models import Allocation, GpuAssignment, Tenant
from telemetry.models import PodMinute
from telemetry.selectors import p95

DEFAULT_WINDOW = timedelta(hours=1)
ADVICE_MARGIN = 0.2


@dataclass(frozen=True)
class TenantEfficiency:
    tenant: str
    requested_gpus: float  # average over the window
    used_p95_gpus: float | None  # None: no telemetry in the window
    over_request: float | None
    usage_ratio: float


@dataclass(frozen=True)
class WorkloadAdvice:
    tenant: str
    workload: str
    pods: int
    advice: Advice


def tenant_efficiency(
    *, window: timedelta = DEFAULT_WINDOW, now: datetime | None = None
) -> dict[str, TenantEfficiency]:
    """Every tenant's requested vs used GPUs over `window` and what follows from it."""
    now = now or timezone.now()
    requested = _requested_gpus(now - window, now)
    used = _used_p95_by_tenant(now - window, now)
    names = set(Tenant.objects.values_list("name", flat=True))
    return {
        name: TenantEfficiency(
            tenant=name,
            requested_gpus=requested.get(name, 0.0),
            used_p95_gpus=used.get(name),
            over_request=over_request(requested.get(name, 0.0), used.get(name)),
            usage_ratio=usage_ratio(requested.get(name, 0.0), used.get(name)),
        )
        for name in sorted(names)
    }


def usage_ratios(*, now: datetime | None = None) -> dict[str, float]:
    """Each tenant's p95 used / requested GPUs over the default window (1 when unknown)."""
    return {name: e.usage_ratio for name, e in tenant_efficiency(now=now).items()}


def workload_advice(
    *, window: timedelta = DEFAULT_WINDOW, now: datetime | None = None, tenant: str | None = None
) -> list[WorkloadAdvice]:
    """Per workload with measured pods: what each pod should request (p95 use plus a margin)."""
    now = now or timezone.now()
    per_pod = _pod_used_p95(now - window, now)
    allocations = (
        Allocation.objects.filter(Q(released_at__isnull=True) | Q(released_at__gte=now - window))
        .select_related("pod__workload__tenant")
        .order_by("pod__workload_id", "pod_id", "-id")
    )
    if tenant is not None:
        allocations = allocations.filter(pod__workload__tenant__name=tenant)
    grouped: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    seen: set[int] = set()
    for allocation in allocations:
        pod = allocation.pod
        if pod.pk in seen:
            continue
        seen.add(pod.pk)
        used = per_pod.get((pod.workload.tenant.namespace, pod.name))
        if used is None:
            continue
        requested = pod.gpus + pod.gpu_milli / MILLI_PER_GPU
        grouped[(pod.workload.tenant.name, pod.workload.name)].append((requested, used))
    return [
        WorkloadAdvice(
            tenant=tenant_name,
            workload=workload,
            pods=len(rows),
            advice=right_size(
                max(r for r, _ in rows), max(u for _, u in rows), margin=ADVICE_MARGIN
            ),
        )
        for (tenant_name, workload), rows in sorted(grouped.items())
        if rows
    ]


def _requested_gpus(start: datetime, end: datetime) -> dict[str, float]:
    """Time-weighted average GPUs each tenant held in [start, end]."""
    span = (end - start).total_seconds()
    held: dict[str, float] = defaultdict(float)
    rows = (
        Allocation.objects.filter(bound_at__isnull=False, bound_at__lt=end)
        .filter(Q(released_at__isnull=True) | Q(released_at__gt=start))
        .values_list(
            "bound_at", "released_at", "pod__gpus", "pod__gpu_milli", "pod__workload__tenant__name"
        )
    )
    for bound_at, released_at, gpus, milli, tenant in rows:
        if bound_at is None:  # excluded by the query; keeps the type checker informed
            continue
        overlap = (min(released_at or end, end) - max(bound_at, start)).total_seconds()
        held[tenant] += (gpus + milli / MILLI_PER_GPU) * max(overlap, 0.0) / span
    return dict(held)


def _pod_used_p95(start: datetime, end: datetime) -> dict[tuple[str, str], float]:
    """p95 over the window of what each pod kept busy, shared pods scaled to their share."""
    factor = _shared_pod_factors()
    series: dict[tuple[str, str], list[float]] = defaultdict(list)
    for namespace, pod, used in PodMinute.objects.filter(
        minute__gte=start, minute__lte=end
    ).values_list("namespace", "pod", "used_p95"):
        series[(namespace, pod)].append(used * factor.get((namespace, pod), 1.0))
    return {key: p95(values) or 0.0 for key, values in series.items()}


def _used_p95_by_tenant(start: datetime, end: datetime) -> dict[str, float]:
    """p95 over the window of each tenant's per-minute sum of what its pods kept busy."""
    factor = _shared_pod_factors()
    owner = dict(Tenant.objects.values_list("namespace", "name"))
    per_minute: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    rows = PodMinute.objects.filter(minute__gte=start, minute__lte=end).values_list(
        "namespace", "pod", "minute", "used_p95"
    )
    for namespace, pod, minute, used in rows:
        tenant = owner.get(namespace)
        if tenant is not None:
            per_minute[tenant][minute] += used * factor.get((namespace, pod), 1.0)
    return {tenant: p95(list(minutes.values())) or 0.0 for tenant, minutes in per_minute.items()}


def _shared_pod_factors() -> dict[tuple[str, str], float]:
    """For pods holding a share of a time-sliced GPU: their milli / all milli held on that GPU."""
    factors: dict[tuple[str, str], float] = {}
    shared = GpuAssignment.objects.filter(
        active=True, exclusive=False, mig_slot__isnull=True
    ).select_related("gpu", "allocation__pod__workload__tenant")
    for assignment in shared:
        total = max(assignment.gpu.used_milli, assignment.milli, 1)
        pod = assignment.allocation.pod
        factors[(pod.workload.tenant.namespace, pod.name)] = assignment.milli / total
    return factors
