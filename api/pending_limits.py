"""The bounds on a tenant's pending work (gpusched/settings.py, MAX_PENDING_*), checked by
api.services.workload_create inside its transaction: what the scheduler holds then grows with what
it can admit, not with what one tenant submits (issue 33, docs/security.md)."""

from __future__ import annotations

from django.conf import settings

from api import selectors
from api.exceptions import Forbidden
from scheduling.models import Tenant


def refuse_past_limits(tenant: Tenant, queue: str, pods: int) -> None:
    """Forbidden (403 "exceeded quota", as Kubernetes' ResourceQuota admission refuses a pod past
    `count/pods`: kubernetes.io/docs/concepts/policy/resource-quotas/) when the submit would leave
    more pods or workloads waiting than the tenant's or the queue's limit (gpusched/settings.py).
    The tenant's row is locked first, so two concurrent submits cannot both pass on one count."""
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()
    counts = selectors.pending_counts(tenant, queue)
    checks = (
        (
            "pods",
            "MAX_PENDING_PODS_PER_TENANT",
            f"tenant {tenant.name!r}",
            counts.tenant_pods,
            pods,
        ),
        ("pods", "MAX_PENDING_PODS_PER_QUEUE", f"queue {queue!r}", counts.queue_pods, pods),
        (
            "workloads",
            "MAX_PENDING_WORKLOADS_PER_TENANT",
            f"tenant {tenant.name!r}",
            counts.tenant_workloads,
            1,
        ),
        (
            "workloads",
            "MAX_PENDING_WORKLOADS_PER_QUEUE",
            f"queue {queue!r}",
            counts.queue_workloads,
            1,
        ),
    )
    for what, setting, of, used, requested in checks:
        limited: int = getattr(settings, setting)
        if used + requested > limited:
            raise Forbidden(
                f"exceeded quota: pending {what} of {of}, requested: {requested}, "
                f"used: {used}, limited: {limited} (GPUSCHED_{setting})",
                {
                    "limit": f"GPUSCHED_{setting}",
                    "requested": requested,
                    "used": used,
                    "limited": limited,
                },
            )
