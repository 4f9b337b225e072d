"""The one read model of quota: per ClusterQueue, flavor and resource its nominal quota and limits,
what its admitted workloads hold (in all and per namespace), what it borrows from its cohort and
what it could still admit. The REST API's /quota and cluster queues, the Queues page and the
Tenants page all read it (docs/dashboard.md has the definitions).

Computed over the whole cluster and filtered afterwards: one aggregate over the workloads holding
quota, grouped by queue, namespace and the usage they hold (workloads of one shape are one row),
whatever the number of pods or of pending workloads."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.db.models import Count

from scheduling.core.queueing.quota import QuotaBook
from scheduling.core.types import GPU_RESOURCE, MILLI_PER_GPU
from scheduling.models import Workload
from scheduling.worker.queue_state import QueueSetup, parse_usage, queue_setup

HOLDING_QUOTA = (Workload.State.ADMITTED, Workload.State.RUNNING)


@dataclass(frozen=True)
class ResourceQuota:
    """One resource of one flavor of a ClusterQueue; amounts canonical (GPUs in milli)."""

    flavor: str
    resource: str
    nominal: int
    borrowing_limit: int | None
    lending_limit: int | None
    used: int  # by every admitted workload of the queue (Kueue's flavorsUsage.total)
    borrowed: int  # used beyond nominal, taken from the cohort
    available: int  # what the queue could still admit now, borrowing included
    used_by: dict[str, int] = field(default_factory=dict)  # namespace -> what it holds of `used`


@dataclass(frozen=True)
class ClusterQueueQuota:
    name: str
    cohort: str
    namespaces: tuple[str, ...]  # those with a LocalQueue pointing at it
    resources: tuple[ResourceQuota, ...]  # in the queue's flavor order

    def flavors(self) -> list[tuple[str, list[ResourceQuota]]]:
        """Its resources grouped per flavor, in order."""
        grouped: dict[str, list[ResourceQuota]] = {}
        for r in self.resources:
            grouped.setdefault(r.flavor, []).append(r)
        return list(grouped.items())

    def nominal_gpus(self) -> float:
        return sum(r.nominal for r in self.resources if r.resource == GPU_RESOURCE) / MILLI_PER_GPU


def held_quota() -> dict[tuple[str, str], dict[tuple[str, str], int]]:
    """(ClusterQueue, namespace) -> (flavor, resource) -> what its admitted workloads hold."""
    held: dict[tuple[str, str], dict[tuple[str, str], int]] = defaultdict(lambda: defaultdict(int))
    for queue, namespace, usage, n in (
        Workload.objects.filter(state__in=HOLDING_QUOTA, cluster_queue__isnull=False)
        .values_list("cluster_queue__name", "tenant__namespace", "quota_usage")
        .annotate(n=Count("id"))
        .order_by()
    ):
        for fr, amount in parse_usage(usage or {}).items():
            held[(queue, namespace)][fr] += amount * n
    return held


def cluster_quota(setup: QueueSetup | None = None) -> dict[str, ClusterQueueQuota]:
    """Every ClusterQueue's quota figures, by name."""
    setup = setup or queue_setup()
    held = held_quota()
    book = QuotaBook(setup.cluster_queues.values(), cohorts=setup.cohorts.values())
    for (queue, _), usage in held.items():
        if queue in book.queues:
            book.charge(queue, usage)
    namespaces: dict[str, set[str]] = defaultdict(set)
    for lq in setup.local_queues.values():
        namespaces[lq.cluster_queue].add(lq.namespace)
    out = {}
    for name, cq in sorted(setup.cluster_queues.items()):
        resources = []
        for flavor, resource, quota in cq.flavor_resources():
            fr = (flavor, resource)
            resources.append(
                ResourceQuota(
                    flavor=flavor,
                    resource=resource,
                    nominal=quota.nominal,
                    borrowing_limit=quota.borrowing_limit,
                    lending_limit=quota.lending_limit,
                    used=book.used(name, fr),
                    borrowed=book.borrowed(name, fr),
                    available=book.available(name, fr),
                    used_by={
                        namespace: usage[fr]
                        for (queue, namespace), usage in sorted(held.items())
                        if queue == name and usage.get(fr)
                    },
                )
            )
        out[name] = ClusterQueueQuota(
            name, cq.cohort, tuple(sorted(namespaces[name])), tuple(resources)
        )
    return out


def namespace_quota(namespace: str, setup: QueueSetup | None = None) -> list[ClusterQueueQuota]:
    """The ClusterQueues `namespace`'s LocalQueues point at: the cluster's read, filtered."""
    return [q for q in cluster_quota(setup).values() if namespace in q.namespaces]
