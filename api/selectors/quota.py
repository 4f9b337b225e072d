"""Quota and usage: what the tenant's ClusterQueue grants and its admitted workloads hold, and
the GPUs it measurably uses."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from api import quantities as q
from api.selectors.tenants import tenant_policy, tenant_queue_names
from scheduling.core.efficiency import Advice
from scheduling.core.queueing.resources import format_quantity
from scheduling.core.types import GPU_RESOURCE, MILLI_PER_GPU
from scheduling.models import Tenant
from scheduling.selectors import quota
from scheduling.selectors.efficiency import advice_of, efficiency_of, minutes_of, usage_window
from scheduling.selectors.queues import resource_usage
from telemetry.selectors import UsagePoint

# --- quota and usage ------------------------------------------------------------------------------


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
class FlavorResourceQuota:
    """One resource of one flavor of a ClusterQueue, as this tenant sees it."""

    name: str
    nominal_quota: str
    borrowing_limit: str | None
    used: str  # by this tenant's admitted workloads
    total: str  # by every admitted workload of the ClusterQueue (Kueue's flavorsUsage.total)
    available: str  # what the ClusterQueue could still admit now, borrowing included


@dataclass(frozen=True)
class TenantClusterQueue:
    name: str
    cohort: str
    flavors: list[tuple[str, list[FlavorResourceQuota]]]


@dataclass(frozen=True)
class QuotaView:
    tenant: Tenant
    queue_names: list[str]
    cluster_queues: list[TenantClusterQueue]
    hard: dict[str, str]  # nominal quota per resource, over the tenant's ClusterQueues' flavors
    used: dict[str, str]  # what the tenant's admitted workloads hold of it
    limits: dict[str, dict[str, str]]


def tenant_quota(tenant: Tenant) -> QuotaView:
    """The tenant's one quota: its ClusterQueues' (those its LocalQueues point at) nominal quota
    per flavor and resource, what its admitted workloads hold of it (pending ones hold nothing),
    what the whole queue holds and could still admit (scheduling.selectors.quota, the cluster's
    read filtered to its namespace); summed per resource as ResourceQuota's `hard` / `used`."""
    policy = tenant_policy(tenant)
    nominal: dict[str, int] = defaultdict(int)
    used: dict[str, int] = defaultdict(int)
    queues = []
    for cq in quota.namespace_quota(tenant.namespace):
        flavors = []
        for flavor, resources in cq.flavors():
            rows = []
            for r in resources:
                mine = r.used_by.get(tenant.namespace, 0)
                nominal[r.resource] += r.nominal
                used[r.resource] += mine
                figures = resource_usage(r)
                rows.append(
                    FlavorResourceQuota(
                        name=r.resource,
                        nominal_quota=figures.nominal_quota,
                        borrowing_limit=figures.borrowing_limit,
                        used=format_quantity(r.resource, mine),
                        total=figures.total,
                        available=figures.available,
                    )
                )
            flavors.append((flavor, rows))
        queues.append(TenantClusterQueue(cq.name, cq.cohort, flavors))
    return QuotaView(
        tenant=tenant,
        queue_names=tenant_queue_names(tenant, policy),
        cluster_queues=queues,
        hard={r: format_quantity(r, a) for r, a in sorted(nominal.items())},
        used={r: format_quantity(r, used[r]) for r in sorted(nominal)},
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
    workload and the per-minute series: one definition (scheduling.selectors.efficiency), the same
    the dashboard's Tenants page shows."""
    now = now or timezone.now()
    read = usage_window(start=now - window, end=now, tenant=tenant.name)
    series = minutes_of(read).get(tenant.name, [])
    efficiency = efficiency_of(series, tenant.name)
    advice = [
        WorkloadAdviceView(a.workload, a.pods, a.advice)
        for a in advice_of(read)
        if a.tenant == tenant.name
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
