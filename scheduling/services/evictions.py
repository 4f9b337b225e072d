"""Evictions: admitted workloads lose their quota and their pods, and go back to their queues.

A pod the cluster still runs while it terminates (Kubernetes: its grace period) keeps what it
holds, in phase Terminating, until the side reports it gone (`pods_gone`); the others release at
once. Either way the workload's quota is released at once: quota is bookkeeping, nodes are not."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from datetime import datetime

from django.db import transaction

from scheduling import events
from scheduling.core.queueing.admission import PODS_READY_TIMEOUT, PREEMPTED
from scheduling.models import (
    Allocation,
    Pod,
    Workload,
)
from scheduling.services.allocations import allocations_release
from scheduling.services.workloads import workload_event


def workloads_evict(
    *,
    workloads: Sequence[Workload],
    reason: str,
    now: datetime,
    preemptor: Workload | None = None,
    terminating: Collection[str] = (),
    pending_reason: str = PREEMPTED,
    requeue_at: datetime | None = None,
) -> set[int]:
    """Preempt (or evict, for a `pending_reason` such as Kueue's InactiveWorkload) admitted
    workloads: their pods give back what they hold (at once, or once gone for the pod uids in
    `terminating`), the workloads go back to their queues (requeued, quota released; not
    admitted before `requeue_at`, when given: a PodsReadyTimeout backoff). Returns the ids of
    those evicted (the ones still admitted or running)."""
    with transaction.atomic():
        payloads, evicted = evict_workloads(
            workloads,
            reason=reason,
            preemptor=preemptor,
            now=now,
            terminating=terminating,
            pending_reason=pending_reason,
            requeue_at=requeue_at,
        )
        events.publish(*payloads)
    return evicted


def evict_workloads(
    workloads: Sequence[Workload],
    *,
    reason: str,
    preemptor: Workload | None,
    now: datetime,
    terminating: Collection[str] = (),
    pending_reason: str = PREEMPTED,
    requeue_at: datetime | None = None,
) -> tuple[list[events.EventPayload], set[int]]:
    """Returns the events to publish and the ids of the workloads evicted."""
    rows = list(
        Workload.objects.filter(
            pk__in=[w.pk for w in workloads],
            state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
        ).select_related("tenant", "cluster_queue")
    )
    if not rows:
        return [], set()
    pods = list(
        Pod.objects.filter(workload__in=rows, phase__in=Pod.ACTIVE_PHASES).select_related(
            "workload__tenant"
        )
    )
    staying = {p.pk for p in pods if p.phase in Pod.PLACED_PHASES and str(p.uid) in terminating}
    allocations_release(
        Allocation.objects.filter(pod__in=pods, active=True)
        .exclude(pod_id__in=staying)
        .select_related("node", "pod"),
        reason=f"{'preempted' if pending_reason == PREEMPTED else 'evicted'}: {reason}"[:256],
        now=now,
    )
    placed = [p for p in pods if p.phase in Pod.PLACED_PHASES]
    for pod in pods:
        pod.phase = Pod.Phase.TERMINATING if pod.pk in staying else Pod.Phase.PENDING
        pod.bound_at = None
        pod.started_at = None
        pod.next_attempt_at = None
        pod.nominated_node = ""
        pod.last_reason = f"{pending_reason}: {reason}"[:1024]
    Pod.objects.bulk_update(
        pods,
        [
            "phase",
            "bound_at",
            "started_at",
            "next_attempt_at",
            "nominated_node",
            "last_reason",
        ],
    )
    payloads: list[events.EventPayload] = []
    by_workload: dict[int, list[str]] = defaultdict(list)
    for pod in pods:
        by_workload[pod.workload_id].append(pod.name)
    for w in rows:
        old_queue = w.cluster_queue.name if w.cluster_queue else ""
        payloads.append(
            events.WorkloadEvicted(
                uid=str(w.uid),
                tenant=w.tenant.name,
                name=w.name,
                queue=w.queue_name,
                cluster_queue=old_queue,
                reason=reason,
                preemptor=str(preemptor.uid) if preemptor else "",
                pods=sorted(by_workload[w.pk]),
            )
        )
        w.state, w.admitted_at, w.cluster_queue = Workload.State.PENDING, None, None
        w.flavors, w.quota_usage, w.node_selector, w.tolerations = {}, {}, {}, []
        w.pending_reason, w.reason = pending_reason, reason[:1024]
        w.evictions += 1
        w.evicted_at = now
        w.eviction_reason = pending_reason
        w.requeue_at = requeue_at
        if pending_reason == PODS_READY_TIMEOUT:
            w.requeue_count += 1
    Workload.objects.bulk_update(
        rows,
        [
            "state",
            "admitted_at",
            "cluster_queue",
            "flavors",
            "quota_usage",
            "node_selector",
            "tolerations",
            "pending_reason",
            "reason",
            "evictions",
            "evicted_at",
            "eviction_reason",
            "requeue_at",
            "requeue_count",
        ],
    )
    payloads += [events.PodPhaseChanged.of(p, phase=p.phase) for p in placed]
    payloads += [workload_event(w) for w in rows]
    return payloads, {w.pk for w in rows}
