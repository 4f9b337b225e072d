"""Reads for pages and the API about Kueue's cohort trees and admission fair sharing: each
cohort's quota and use, each fair-shared LocalQueue's decayed usage and rank; and where the queues
come from."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from scheduling.core.queueing.config import AdmissionMode
from scheduling.core.queueing.fair_usage import add, in_base_units, weighted_usage
from scheduling.core.queueing.resources import format_base_units, format_quantity
from scheduling.models import LocalQueue, QueueSource, Workload
from scheduling.worker.queue_state import admitted_workloads, parse_usage, queue_setup, quota_book


def queue_source() -> QueueSource:
    """Where the queues come from (models.QueueSource); no row: the database (applyqueues and
    the REST API)."""
    return QueueSource.objects.first() or QueueSource()


@dataclass(frozen=True)
class CohortResource:
    flavor: str
    name: str
    nominal_quota: str  # the cohort's own, on top of its members'
    subtree_quota: str  # everything its subtree brings (members' lendable parts included)
    usage: str  # what the subtree uses of it beyond the members' local quotas


@dataclass(frozen=True)
class CohortStatus:
    name: str
    parent: str
    weight: float
    defined: bool  # a Cohort object (else only named by queues or children)
    cluster_queues: list[str]
    resources: list[CohortResource]
    weighted_share: int  # at its parent's level; 0 for a root


def cohort_status() -> list[CohortStatus]:
    """Each cohort of the trees: its parent, its quota and the use of its subtree."""
    setup = queue_setup()
    book = quota_book(setup, admitted_workloads())
    members: dict[str, list[str]] = defaultdict(list)
    for name, cq in setup.cluster_queues.items():
        if cq.cohort:
            members[cq.cohort].append(name)
    out = []
    for name in book.cohort_names():
        spec = setup.cohorts.get(name)
        resources = [
            CohortResource(
                flavor,
                resource,
                format_quantity(resource, own),
                format_quantity(resource, total),
                format_quantity(resource, used),
            )
            for (flavor, resource), (own, total, used) in book.cohort_resources(name).items()
        ]
        out.append(
            CohortStatus(
                name=name,
                parent=book.cohort_parent(name),
                weight=spec.weight if spec else 1.0,
                defined=spec is not None,
                cluster_queues=sorted(members[name]),
                resources=resources,
                weighted_share=book.cohort_share(name),
            )
        )
    return out


@dataclass(frozen=True)
class LocalQueueFairUsage:
    """Admission fair sharing: a LocalQueue's decayed usage and where it stands."""

    key: str  # "namespace/name"
    cluster_queue: str
    weight: float
    consumed: dict[str, str]  # resource -> decayed usage, as a Kubernetes quantity
    usage: float  # what the order goes by: weighted sum of consumed / weight
    rank: int  # 1-based among its cluster queue's LocalQueues, lowest usage first
    sampled_at: datetime | None


def local_queue_fair_usage() -> dict[str, LocalQueueFairUsage]:
    """Per LocalQueue of a cluster queue with UsageBasedAdmissionFairSharing."""
    setup = queue_setup()
    fair = [
        lq
        for lq in setup.local_queues.values()
        if setup.cluster_queues[lq.cluster_queue].admission_mode is AdmissionMode.USAGE_BASED
    ]
    if not fair:
        return {}
    state = setup.fair_usage
    sampled = {
        f"{ns}/{name}": at
        for ns, name, at in LocalQueue.objects.values_list("namespace", "name", "usage_sampled_at")
    }
    usage = {
        lq.key: weighted_usage(state.consumed.get(lq.key, {}), lq.weight, state.settings)
        for lq in fair
    }
    by_queue: dict[str, list[str]] = defaultdict(list)
    for lq in fair:
        by_queue[lq.cluster_queue].append(lq.key)
    rank = {
        key: k
        for keys in by_queue.values()
        for k, key in enumerate(sorted(keys, key=lambda key: (usage[key], key)), start=1)
    }
    return {
        lq.key: LocalQueueFairUsage(
            key=lq.key,
            cluster_queue=lq.cluster_queue,
            weight=lq.weight,
            consumed={
                resource: format_base_units(resource, amount)
                for resource, amount in sorted(state.consumed.get(lq.key, {}).items())
            },
            usage=usage[lq.key],
            rank=rank[lq.key],
            sampled_at=sampled.get(lq.key),
        )
        for lq in fair
    }


def local_queue_admitted_usage() -> dict[str, dict[str, float]]:
    """Per LocalQueue ("namespace/name"): the quota its admitted workloads hold, per resource in
    Kubernetes base units (admission fair sharing's "current usage")."""
    out: dict[str, dict[str, float]] = {}
    for namespace, queue, usage in Workload.objects.filter(
        state__in=(Workload.State.ADMITTED, Workload.State.RUNNING), cluster_queue__isnull=False
    ).values_list("tenant__namespace", "queue_name", "quota_usage"):
        key = f"{namespace}/{queue}"
        out[key] = add(out.get(key, {}), in_base_units(parse_usage(usage)))
    return out
