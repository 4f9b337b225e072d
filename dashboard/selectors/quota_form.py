"""The quota form's rows: one per flavor and resource of each ClusterQueue a tenant's LocalQueues
point at, with its nominal quota and its borrowing and lending limits where the queue sets them."""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.core.queueing.resources import format_quantity
from scheduling.models import ClusterQueue, LocalQueue, Tenant

LIMITS = ("nominalQuota", "borrowingLimit", "lendingLimit")


@dataclass(frozen=True)
class QuotaRow:
    flavor: str
    resource: str
    values: dict[str, str]  # limit -> quantity as written, for the limits the queue sets

    @property
    def key(self) -> str:
        """The row's field prefix, as the service names its problems: `<flavor>/<resource>`."""
        return f"{self.flavor}/{self.resource}"


@dataclass(frozen=True)
class QueueForm:
    cluster_queue: str
    shared_with: list[str]  # the other tenants whose LocalQueues point at it
    rows: list[QuotaRow]


def quota_forms(tenant: Tenant) -> list[QueueForm]:
    names = sorted(
        set(
            LocalQueue.objects.filter(namespace=tenant.namespace).values_list(
                "cluster_queue__name", flat=True
            )
        )
    )
    namespaces = {
        t.namespace: t.name for t in Tenant.objects.exclude(pk=tenant.pk).only("name", "namespace")
    }
    out = []
    for cq in ClusterQueue.objects.filter(name__in=names).order_by("name"):
        feeding = LocalQueue.objects.filter(cluster_queue=cq).values_list("namespace", flat=True)
        rows = [
            QuotaRow(
                flavor=fq["name"],
                resource=r["name"],
                values={
                    limit: format_quantity(r["name"], r[limit])
                    for limit in LIMITS
                    if r.get(limit) is not None
                },
            )
            for group in cq.resource_groups
            for fq in group["flavors"]
            for r in fq["resources"]
        ]
        shared = sorted({namespaces[ns] for ns in feeding if ns in namespaces})
        out.append(QueueForm(cluster_queue=cq.name, shared_with=shared, rows=rows))
    return out
