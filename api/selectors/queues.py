"""LocalQueues and ClusterQueues with their status, and priority classes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from api.models import TenantPolicy
from api.selectors.tenants import tenant_queue_names
from scheduling.models import (
    ClusterQueue,
    LocalQueue,
    PriorityClass,
    Tenant,
)
from scheduling.selectors import queue_counts
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
    """Per tenant: its LocalQueues (and any other queue name its workloads use or its policy
    names) with Kueue's status counts, from the one read model (scheduling.selectors.queue_counts):
    `admitted` counts every workload holding quota, running or not, as Kueue's admittedWorkloads."""
    tenants = [tenant] if tenant is not None else list(Tenant.objects.order_by("name"))
    counts = queue_counts.local_queue_counts(tenant.namespace if tenant is not None else None)
    policies = {p.tenant_id: p for p in TenantPolicy.objects.filter(tenant__in=tenants)}
    out = []
    for t in tenants:
        names = set(tenant_queue_names(t, policies.get(t.pk)))
        names.update(name for (ns, name) in counts if ns == t.namespace)
        for name in sorted(names):
            c = counts.get((t.namespace, name)) or queue_counts.QueueCounts(None)
            out.append(
                LocalQueueView(
                    namespace=t.namespace,
                    tenant=t.name,
                    name=name,
                    cluster_queue=c.cluster_queue,
                    pending=c.waiting_for_quota,
                    admitted=c.admitted,
                    running=c.running,
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
