"""LocalQueues and ClusterQueues with their status, and priority classes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count

from api.models import TenantPolicy
from api.selectors.tenants import tenant_queue_names
from scheduling.models import (
    ClusterQueue,
    LocalQueue,
    PriorityClass,
    Tenant,
    Workload,
)
from scheduling.selectors import queues as scheduling_selectors

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
    """Each ClusterQueue row with its Kueue-like status (scheduling.selectors.queues) and its
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
