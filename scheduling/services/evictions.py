"""Evictions: admitted workloads lose their quota and their pods, and go back to their queues."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from scheduling import events
from scheduling.models import (
    Allocation,
    Pod,
    Workload,
)
from scheduling.services.allocations import allocations_release
from scheduling.services.workloads import workload_event


def workloads_evict(
    *, workloads: Sequence[Workload], reason: str, now: datetime, preemptor: Workload | None = None
) -> list[str]:
    """Preempt admitted workloads: release their pods' allocations, put the pods back to Pending
    and the workloads back in their queues (requeued, quota released). Returns the uids of the
    pods whose allocations were released."""
    with transaction.atomic():
        payloads, released, _ = evict_workloads(
            workloads, reason=reason, preemptor=preemptor, now=now
        )
        events.publish(*payloads)
    return released


def evict_workloads(
    workloads: Sequence[Workload], *, reason: str, preemptor: Workload | None, now: datetime
) -> tuple[list[events.EventPayload], list[str], set[int]]:
    """Returns the events to publish, the uids of the pods whose allocations were released and
    the ids of the workloads evicted (those that were admitted or running)."""
    rows = list(
        Workload.objects.filter(
            pk__in=[w.pk for w in workloads],
            state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
        ).select_related("tenant", "cluster_queue")
    )
    if not rows:
        return [], [], set()
    pods = list(
        Pod.objects.filter(workload__in=rows, phase__in=Pod.ACTIVE_PHASES).select_related(
            "workload__tenant"
        )
    )
    allocations = list(
        Allocation.objects.filter(pod__in=pods, active=True).select_related("node", "pod")
    )
    released = [str(a.pod.uid) for a in allocations]
    allocations_release(allocations, reason=f"preempted: {reason}"[:256], now=now)
    placed = [p for p in pods if p.phase in Pod.PLACED_PHASES]
    for pod in pods:
        pod.phase = Pod.Phase.PENDING
        pod.bound_at = None
        pod.started_at = None
        pod.next_attempt_at = None
        pod.last_reason = f"Preempted: {reason}"[:1024]
        pod.simulation.pop("lost_s", None)  # it starts over
    Pod.objects.bulk_update(
        pods, ["phase", "bound_at", "started_at", "next_attempt_at", "last_reason", "simulation"]
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
        w.pending_reason, w.reason = "Preempted", reason[:1024]
        w.evictions += 1
        w.evicted_at = now
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
        ],
    )
    payloads += [events.PodPhaseChanged.of(p, phase=Pod.Phase.PENDING) for p in placed]
    payloads += [workload_event(w) for w in rows]
    return payloads, released, {w.pk for w in rows}
