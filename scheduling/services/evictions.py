"""Evictions: admitted workloads lose their quota and their pods, and go back to their queues.

A pod the cluster still runs while it terminates (Kubernetes: its grace period) keeps what it
holds, in phase Terminating, until the side reports it gone (`pods_gone`); the others release at
once. Either way the workload's quota is released at once: quota is bookkeeping, nodes are not.

Bounded and deadlock-free: the workloads go in transactions of whole workloads holding up to
`EVICTION_BATCH_PODS` active pods together (one workload larger than that is still one), each
committed before the next begins, the worker's liveness told after each (common/process_metrics
`heartbeat`). Every writer that changes a workload's pods together takes its locks in one order
(docs/architecture.md, "Lock order"): the workload rows first, by id, then their pods, by id, then
allocations and the counters; a cancel (scheduling/services/workloads.py) does the same, so the
two queue behind the workload row instead of each holding what the other waits for."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import Count, Q

from common.process_metrics import heartbeat
from scheduling import events
from scheduling.bulk import update_rows
from scheduling.core.queueing.admission import PODS_READY_TIMEOUT, PREEMPTED
from scheduling.models import (
    Allocation,
    Pod,
    Workload,
)
from scheduling.services.allocations import allocations_release
from scheduling.services.workloads import workload_event

# Active pods evicted in one transaction (whole workloads; a larger workload is one on its own):
# a few thousand rows' locks and a few hundred milliseconds of statements at most.
EVICTION_BATCH_PODS = 1000


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
    evicted: set[int] = set()
    for batch in _batches(sorted({w.pk for w in workloads})):
        with transaction.atomic():
            payloads, done = evict_workloads(
                batch,
                reason=reason,
                preemptor=preemptor,
                now=now,
                terminating=terminating,
                pending_reason=pending_reason,
                requeue_at=requeue_at,
            )
            events.publish(*payloads)
        evicted |= done
        heartbeat()
    return evicted


def _batches(ids: Sequence[int]) -> Iterator[list[int]]:
    """The workload ids in id order, in runs whose active pods add up to EVICTION_BATCH_PODS at
    most (or one workload, when it alone has more)."""
    sizes = dict(
        Workload.objects.filter(pk__in=ids)
        .annotate(active_pods=Count("pods", filter=Q(pods__phase__in=Pod.ACTIVE_PHASES)))
        .values_list("pk", "active_pods")
    )
    batch: list[int] = []
    pods = 0
    for pk in ids:
        size = sizes.get(pk, 0)
        if batch and pods + size > EVICTION_BATCH_PODS:
            yield batch
            batch, pods = [], 0
        batch.append(pk)
        pods += size
    if batch:
        yield batch


def evict_workloads(
    workload_ids: Sequence[int],
    *,
    reason: str,
    preemptor: Workload | None,
    now: datetime,
    terminating: Collection[str] = (),
    pending_reason: str = PREEMPTED,
    requeue_at: datetime | None = None,
) -> tuple[list[events.EventPayload], set[int]]:
    """Returns the events to publish and the ids of the workloads evicted. Runs in the caller's
    transaction; locks in the module's order (workloads by id, then their pods by id)."""
    rows = list(
        Workload.objects.filter(
            pk__in=workload_ids,
            state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
        )
        .select_related("tenant", "cluster_queue")
        .select_for_update(of=("self",), no_key=True)
        .order_by("id")
    )
    if not rows:
        return [], set()
    # Only the columns an eviction reads or writes, each pod given its (locked) workload: the
    # rest of a pod's row (its selectors, tolerations, explanation) would be decoded for nothing.
    pods = list(
        Pod.objects.filter(workload__in=rows, phase__in=Pod.ACTIVE_PHASES)
        .only("uid", "name", "phase", "workload_id")
        .select_for_update()
        .order_by("id")
    )
    by_id = {w.pk: w for w in rows}
    for pod in pods:
        pod.workload = by_id[pod.workload_id]
    staying = {p.pk for p in pods if p.phase in Pod.PLACED_PHASES and str(p.uid) in terminating}
    allocations_release(
        Allocation.objects.filter(pod__in=pods, active=True).exclude(pod_id__in=staying),
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
    update_rows(
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
    update_rows(
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
