"""Quota and usage: what the tenant's ClusterQueue grants and its admitted workloads hold, and
the GPUs it measurably uses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Count, Sum
from django.utils import timezone

from api import quantities as q
from api.selectors.tenants import tenant_policy, tenant_queue_names
from scheduling.core.efficiency import Advice
from scheduling.core.queueing.resources import Demand
from scheduling.core.types import GPU_RESOURCE, MILLI_PER_GPU, PodRequest
from scheduling.efficiency import tenant_efficiency, workload_advice
from scheduling.models import (
    Pod,
    Tenant,
)
from telemetry.selectors import UsagePoint, tenant_usage_series

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
    """Requested vs DCGM-measured GPUs over `window` (scheduling.efficiency), the overRequest
    index, right-sizing advice per workload and the per-minute series (telemetry.selectors)."""
    now = now or timezone.now()
    efficiency = tenant_efficiency(window=window, now=now).get(tenant.name)
    requested = efficiency.requested_gpus if efficiency else 0.0
    advice = [
        WorkloadAdviceView(a.workload, a.pods, a.advice)
        for a in workload_advice(window=window, now=now, tenant=tenant.name)
    ]
    series = tenant_usage_series(
        start=now - window,
        end=now,
        tenants={tenant.namespace: tenant.name},
        requested={tenant.name: requested},
    ).get(tenant.name, [])
    return UsageView(
        tenant=tenant,
        window=window,
        requested_gpus=requested,
        used_p95_gpus=efficiency.used_p95_gpus if efficiency else None,
        over_request=efficiency.over_request if efficiency else None,
        usage_ratio=efficiency.usage_ratio if efficiency else 1.0,
        advice=advice,
        series=series,
    )
