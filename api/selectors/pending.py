"""Why a workload waits (position, reason, kube-scheduler's per-filter summary, estimated start)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils import timezone

from scheduling import selectors as scheduling_selectors
from scheduling.models import (
    PlacementDecision,
    Pod,
    Workload,
)

# --- pending status -----------------------------------------------------------------------------

_SUMMARY = re.compile(r"(\d+)/(\d+) nodes are available:? ?(.*?)\.?$", re.S)
_REASON = re.compile(r"(\d+) (.+?)(?=, \d+ |$)")


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
    estimated_start: datetime | None
    cluster_queue: str | None = None
    local_queue: str = ""


def parse_summary(summary: str) -> tuple[int | None, int | None, list[ReasonCount]]:
    """kube-scheduler's "0/12 nodes are available: 8 Insufficient nvidia.com/gpu, 4 ..." as
    (feasible, nodes, [(reason, nodes)]), most common reason first."""
    match = _SUMMARY.search(summary.strip())
    if not match:
        return None, None, []
    reasons = [ReasonCount(r.strip(), int(n)) for n, r in _REASON.findall(match.group(3))]
    return int(match.group(1)), int(match.group(2)), reasons


def workload_pending_status(workload: Workload, now: datetime | None = None) -> PendingStatus:
    """Why the workload waits and when it may start: position, reason, message and estimated start
    come from the queue (scheduling.selectors.pending_workloads: its cluster queue's order while
    waiting for quota, the order of admitted workloads while waiting for nodes); the per-filter
    node counts and the last decision come from the pods' last scheduling attempt."""
    now = now or timezone.now()
    pending = list(workload.pods.filter(phase=Pod.Phase.PENDING).order_by("-last_attempt_at"))
    queued = None
    if workload.state in Workload.ACTIVE_STATES and pending:
        for item in scheduling_selectors.pending_workloads(
            now, namespace=workload.tenant.namespace
        ):
            if item.workload.pk == workload.pk:
                queued = item
                break
    if queued is None:
        return PendingStatus(
            workload, False, None, None, "", len(pending), 0, None, None, None, [], None, None
        )
    tried = [p for p in pending if p.last_reason]
    latest = tried[0] if tried else None
    feasible, nodes, reasons = parse_summary(latest.last_reason) if latest else (None, None, [])
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
        nodes=nodes,
        feasible_nodes=feasible,
        reasons=reasons,
        last_decision=decision.explanation if decision else None,
        estimated_start=queued.estimated_start,
        cluster_queue=queued.cluster_queue or None,
        local_queue=queued.local_queue,
    )
