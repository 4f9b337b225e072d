"""Why a workload waits (position, reason, kube-scheduler's per-filter summary, estimated start)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduling.models import (
    LocalQueue,
    PlacementDecision,
    Pod,
    Tenant,
    Workload,
)
from scheduling.selectors import queues as scheduling_selectors
from scheduling.selectors import why_pending
from scheduling.selectors.estimates import StartEstimate

# --- pending status -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReasonCount:
    reason: str
    nodes: int


@dataclass(frozen=True)
class PendingStatus:
    workload: Workload
    waiting: bool
    position: int | None  # 1 = next; None when not waiting
    reason: str | None
    message: str
    pods_pending: int
    attempts: int
    last_attempt_at: datetime | None
    nodes: int | None
    feasible_nodes: int | None
    reasons: list[ReasonCount]
    last_decision: dict[str, Any] | None
    estimate: StartEstimate | None  # the scheduler's latest, None: not estimated yet
    cluster_queue: str | None = None
    local_queue: str = ""
    # Kueue's visibility API: 1-based, among the workloads waiting for quota (None otherwise).
    position_in_cluster_queue: int | None = None
    position_in_local_queue: int | None = None


def workload_pending_status(workload: Workload, now: datetime | None = None) -> PendingStatus:
    """Why the workload waits and when it may start: position, reason, message and estimated start
    come from the queue (scheduling.selectors.queues.pending_workloads: its cluster queue's order
    while waiting for quota, the order of admitted workloads while waiting for nodes); the
    per-filter node counts come from the structured explanation of the pods' last scheduling attempt
    (scheduling.selectors.why_pending, the read the dashboard uses too) and the last decision from
    its record."""
    now = now or timezone.now()
    pending = list(workload.pods.filter(phase=Pod.Phase.PENDING).order_by("-last_attempt_at"))
    queued = None
    if workload.state in Workload.ACTIVE_STATES and pending:
        waiting = scheduling_selectors.pending_workloads(now, namespace=workload.tenant.namespace)
        queued = next((item for item in waiting if item.workload.pk == workload.pk), None)
    if queued is None:
        return PendingStatus(
            workload,
            False,
            None,
            None,
            "",
            len(pending),
            0,
            None,
            None,
            None,
            [],
            None,
            None,
            cluster_queue=cluster_queue_of(workload),
            local_queue=f"{workload.tenant.namespace}/{workload.queue_name}",
        )
    in_local = local_queue_positions(waiting)
    tried = [p for p in pending if p.last_reason]
    latest = tried[0] if tried else None
    why = why_pending.of_pod(latest) if latest else None
    decision = (
        PlacementDecision.objects.filter(pod__in=pending).order_by("-id").first()
        if latest
        else None
    )
    return PendingStatus(
        workload=workload,
        waiting=True,
        position=queued.position or None,
        reason=queued.reason,
        message=queued.message,
        pods_pending=len(pending),
        attempts=max((p.attempts for p in pending), default=0),
        last_attempt_at=latest.last_attempt_at if latest else None,
        nodes=why.nodes if why else None,
        feasible_nodes=why.feasible if why else None,
        reasons=[ReasonCount(g.reason, g.nodes) for g in why.groups] if why else [],
        last_decision=decision.explanation if decision else None,
        estimate=queued.estimate,
        cluster_queue=queued.cluster_queue or cluster_queue_of(workload),
        local_queue=queued.local_queue,
        position_in_cluster_queue=queued.position if workload.pk in in_local else None,
        position_in_local_queue=in_local.get(workload.pk),
    )


def cluster_queue_of(workload: Workload) -> str | None:
    """The ClusterQueue whose quota it holds, else the one its LocalQueue points at."""
    if workload.cluster_queue is not None:
        return workload.cluster_queue.name
    lq = (
        LocalQueue.objects.filter(namespace=workload.tenant.namespace, name=workload.queue_name)
        .select_related("cluster_queue")
        .first()
    )
    return lq.cluster_queue.name if lq is not None else None


def local_queue_positions(
    waiting: Sequence[scheduling_selectors.PendingWorkload],
) -> dict[int, int]:
    """Kueue's positionInLocalQueue: among the workloads waiting for quota (state Pending, a
    place in their ClusterQueue's order), their rank within their own LocalQueue."""
    by_queue: dict[str, list[scheduling_selectors.PendingWorkload]] = defaultdict(list)
    for item in waiting:
        if item.workload.state == Workload.State.PENDING and item.position > 0:
            by_queue[item.local_queue].append(item)
    return {
        item.workload.pk: k
        for items in by_queue.values()
        for k, item in enumerate(sorted(items, key=lambda i: i.position), start=1)
    }


@dataclass(frozen=True)
class QueuedView:
    """One entry of a queue's pending workloads (Kueue's visibility API)."""

    workload: Workload
    cluster_queue: str
    local_queue: str
    position_in_cluster_queue: int
    position_in_local_queue: int
    reason: str
    message: str


def local_queue_pending(tenant: Tenant, queue_name: str) -> list[QueuedView]:
    """The workloads waiting for quota in the tenant's LocalQueue, in admission order."""
    waiting = scheduling_selectors.pending_workloads(namespace=tenant.namespace)
    in_local = local_queue_positions(waiting)
    key = f"{tenant.namespace}/{queue_name}"
    out = [
        QueuedView(
            item.workload,
            item.cluster_queue,
            item.local_queue,
            item.position,
            in_local[item.workload.pk],
            item.reason,
            item.message,
        )
        for item in waiting
        if item.local_queue == key and item.workload.pk in in_local
    ]
    return sorted(out, key=lambda v: v.position_in_local_queue)
