"""Tenants, their policy (LimitRange-style limits) and the queues they may submit to."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from api import quantities as q
from api.exceptions import NotFound
from api.models import ApiToken, TenantPolicy
from api.specs import Limits
from scheduling.models import (
    LocalQueue,
    Pod,
    Tenant,
    Workload,
)

DEFAULT_QUEUE = "default"

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


def tenant_tokens(tenant: Tenant) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(tenant=tenant).order_by("id")


@dataclass(frozen=True)
class PendingCounts:
    """A tenant's work not yet placed: pods waiting for a node (of any active workload) and
    workloads waiting for admission, in all its queues and in one of them."""

    tenant_pods: int
    queue_pods: int
    tenant_workloads: int
    queue_workloads: int


def pending_counts(tenant: Tenant, queue_name: str) -> PendingCounts:
    """Read through the tenant's own workloads (its index), never a scan of the cluster's."""
    in_queue = Q(workload__queue_name=queue_name)
    pods = Pod.objects.filter(
        workload__tenant=tenant,
        workload__state__in=Workload.ACTIVE_STATES,
        phase=Pod.Phase.PENDING,
    ).aggregate(tenant=Count("id"), queue=Count("id", filter=in_queue))
    workloads = Workload.objects.filter(tenant=tenant, state=Workload.State.PENDING).aggregate(
        tenant=Count("id"), queue=Count("id", filter=Q(queue_name=queue_name))
    )
    return PendingCounts(
        tenant_pods=pods["tenant"],
        queue_pods=pods["queue"],
        tenant_workloads=workloads["tenant"],
        queue_workloads=workloads["queue"],
    )
