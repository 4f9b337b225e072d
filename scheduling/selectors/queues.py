"""Page and API queries about the queues: each cluster queue's Kueue-like status, and the pending
workloads with their position, reason and estimated start. (What the admission cycle reads is in
queue_state; the scheduler's snapshot in cluster_state.)"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count

from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing import ordering
from scheduling.core.queueing.admission import QueuedWorkload
from scheduling.core.queueing.config import (
    AdmissionMode,
    ConsolidationPolicy,
    StopPolicy,
)
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import QuotaBook
from scheduling.core.queueing.resources import format_quantity
from scheduling.models import (
    ClusterQueue,
    LocalQueue,
    Pod,
    Workload,
)
from scheduling.selectors import quota
from scheduling.selectors.efficiency import recent_usage_ratios
from scheduling.selectors.estimates import StartEstimate, start_estimate
from scheduling.worker.queue_state import (
    QueueSetup,
    admitted_workloads,
    queue_setup,
    queued_workloads,
    quota_book,
)


@dataclass(frozen=True)
class ResourceUsage:
    name: str
    nominal_quota: str
    borrowing_limit: str | None
    lending_limit: str | None
    total: str  # in use (Kueue's flavorsUsage.total)
    borrowed: str
    available: str  # what the queue could still take now, borrowing included


@dataclass(frozen=True)
class ClusterQueueStatus:
    name: str
    cohort: str
    queueing_strategy: str
    weight: float
    flavors_usage: list[tuple[str, list[ResourceUsage]]]
    pending_workloads: int
    admitted_workloads: int
    weighted_share: int  # Kueue's DRS (status.fairSharing.weightedShare)
    dominant_resource: str
    admission_mode: str = AdmissionMode.NONE.value
    stop_policy: str = StopPolicy.NONE.value
    consolidation: str = ConsolidationPolicy.ALLOWED.value
    cohort_path: tuple[str, ...] = ()  # its cohort, then each ancestor up to the root


def cluster_queue_status() -> list[ClusterQueueStatus]:
    """Each cluster queue's quota, use, borrowing (scheduling.selectors.quota's one read) and fair
    share, like Kueue's status; its workloads counted in SQL."""
    setup = queue_setup()
    admitted = admitted_workloads(recent_usage_ratios())
    book = quota_book(setup, admitted)
    quotas = quota.cluster_quota(setup)
    pending: dict[str, int] = defaultdict(int)
    for namespace, queue_name, n in (
        Workload.objects.filter(state=Workload.State.PENDING)
        .values_list("tenant__namespace", "queue_name")
        .annotate(n=Count("id"))
        .order_by()
    ):
        lq = setup.local_queues.get(f"{namespace}/{queue_name}")
        if lq is not None:
            pending[lq.cluster_queue] += n
    holding: dict[str, int] = defaultdict(int)
    for a in admitted:
        holding[a.cluster_queue] += 1
    out = []
    for name, cq in sorted(setup.cluster_queues.items()):
        share, dominant = book.dominant_resource_share(name)
        out.append(
            ClusterQueueStatus(
                name=name,
                cohort=cq.cohort,
                queueing_strategy=cq.queueing_strategy.value,
                weight=cq.weight,
                flavors_usage=[
                    (flavor, [resource_usage(r) for r in resources])
                    for flavor, resources in quotas[name].flavors()
                ],
                pending_workloads=pending[name],
                admitted_workloads=holding[name],
                weighted_share=share,
                dominant_resource=dominant,
                admission_mode=cq.admission_mode.value,
                stop_policy=cq.stop_policy.value,
                consolidation=cq.consolidation.value,
                cohort_path=tuple(book.cohort_chain(name)),
            )
        )
    return out


def resource_usage(r: quota.ResourceQuota) -> ResourceUsage:
    """A quota figure as Kubernetes quantities."""

    def fmt(amount: int | None) -> str | None:
        return None if amount is None else format_quantity(r.resource, amount)

    return ResourceUsage(
        name=r.resource,
        nominal_quota=format_quantity(r.resource, r.nominal),
        borrowing_limit=fmt(r.borrowing_limit),
        lending_limit=fmt(r.lending_limit),
        total=format_quantity(r.resource, r.used),
        borrowed=format_quantity(r.resource, r.borrowed),
        available=format_quantity(r.resource, r.available),
    )


@dataclass(frozen=True)
class PendingWorkload:
    """Why a workload is not running yet, where it stands, and when it may start."""

    workload: Workload
    cluster_queue: str
    local_queue: str
    position: int  # 1-based: in its cluster queue (waiting for quota) or among admitted ones
    reason: str  # WaitingForQuota, NoFit, TopologyPlacementFailed, WaitingForGang, ...
    message: str
    estimate: StartEstimate | None  # None: not estimated yet


def pending_workloads(
    now: datetime | None = None,
    *,
    namespace: str | None = None,
    cluster_queue: str | None = None,
) -> list[PendingWorkload]:
    """Every workload waiting for quota or for nodes, with its position in its queue, the reason
    and the estimated start the scheduling cycle last recorded (scheduling.worker.estimates: the
    queue replayed with the real core against run times learnt from finished workloads)."""
    setup = queue_setup()
    admitted = admitted_workloads()
    book = quota_book(setup, admitted)
    # What pending pods ask orders only the queues admitting by usage (an entry penalty): the
    # others' positions need no read of every pending pod (issue 33: a tenant's /status read
    # the 30,000 pending pods of others, twice).
    usage_based = {
        name
        for name, cq in setup.cluster_queues.items()
        if cq.admission_mode is AdmissionMode.USAGE_BASED
    }
    queued = queued_workloads(setup, demand_in=usage_based)
    unplaced = list(
        Workload.objects.filter(state=Workload.State.ADMITTED, pods__phase=Pod.Phase.PENDING)
        .distinct()
        .select_related("tenant", "cluster_queue")
        .order_by("-priority", "created_at", "id")
    )
    out: list[PendingWorkload] = []
    positions = ordering.positions(queue_orders(setup, book, queued, admitted))
    for w, q in queued:
        if q is None:
            lq_key = f"{w.tenant.namespace}/{w.queue_name}"
            reason = w.pending_reason or queue_admission.INADMISSIBLE
            message = w.reason or f"LocalQueue {lq_key} does not exist"
            out.append(PendingWorkload(w, "", lq_key, 0, reason, message, start_estimate(w)))
            continue
        out.append(
            PendingWorkload(
                w,
                q.cluster_queue,
                q.local_queue,
                positions.get(q.key, 0),
                w.pending_reason or queue_admission.WAITING_FOR_QUOTA,
                w.reason,
                start_estimate(w),
            )
        )
    # Admitted, waiting for nodes.
    for k, w in enumerate(unplaced, start=1):
        out.append(
            PendingWorkload(
                w,
                w.cluster_queue.name if w.cluster_queue else "",
                f"{w.tenant.namespace}/{w.queue_name}",
                k,
                w.pending_reason or queue_admission.NO_FIT,
                w.reason,
                start_estimate(w),
            )
        )
    if namespace is not None:
        out = [p for p in out if p.workload.tenant.namespace == namespace]
    if cluster_queue is not None:
        out = [p for p in out if p.cluster_queue == cluster_queue]
    return out


def queue_orders(
    setup: QueueSetup,
    book: QuotaBook,
    queued: Sequence[tuple[Workload, QueuedWorkload | None]],
    admitted: Sequence[AdmittedWorkload],
) -> dict[str, ordering.QueueOrder]:
    """Each cluster queue's pending workloads in the order the admission cycle serves them."""
    return ordering.queue_orders(
        book,
        [q for _, q in queued if q is not None and q.cluster_queue in book.queues and q.active],
        admitted,
        setup.local_queues,
        setup.fair_usage,
    )


def admits_queue(namespace: str, name: str) -> bool:
    """Whether gpusched's queues take a workload naming LocalQueue `name` in `namespace`: it
    exists, or no ClusterQueue does (then every workload is admitted as it comes)."""
    if LocalQueue.objects.filter(namespace=namespace, name=name).exists():
        return True
    return not ClusterQueue.objects.exists()
