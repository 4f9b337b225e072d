"""Page and API queries about the queues: each cluster queue's Kueue-like status, and the pending
workloads with their position, reason and estimated start. (What the admission cycle reads is in
queue_state; the scheduler's snapshot in cluster_state.)"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing import ordering
from scheduling.core.queueing.admission import QueuedWorkload
from scheduling.core.queueing.config import (
    AdmissionMode,
    StopPolicy,
)
from scheduling.core.queueing.estimate import Queued, Running, estimate_starts
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import FlavorResource, QuotaBook
from scheduling.core.queueing.resources import GPU, format_quantity
from scheduling.efficiency import usage_ratios
from scheduling.models import (
    Gpu,
    Pod,
    Workload,
)
from scheduling.queue_state import (
    QueueSetup,
    admitted_workloads,
    pod_facts,
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
    cohort_path: tuple[str, ...] = ()  # its cohort, then each ancestor up to the root


def cluster_queue_status() -> list[ClusterQueueStatus]:
    """Each cluster queue's quota, use, borrowing and fair share, like Kueue's status."""
    setup = queue_setup()
    admitted = admitted_workloads(usage_ratios())
    book = quota_book(setup, admitted)
    pending: dict[str, int] = defaultdict(int)
    for _, queued in queued_workloads(setup):
        if queued is not None:
            pending[queued.cluster_queue] += 1
    holding: dict[str, int] = defaultdict(int)
    for a in admitted:
        holding[a.cluster_queue] += 1
    out = []
    for name, cq in sorted(setup.cluster_queues.items()):
        flavors: dict[str, list[ResourceUsage]] = {}
        for flavor, resource, quota in cq.flavor_resources():
            fr = (flavor, resource)

            def fmt(amount: int | None, resource: str = resource) -> str | None:
                return None if amount is None else format_quantity(resource, amount)

            flavors.setdefault(flavor, []).append(
                ResourceUsage(
                    name=resource,
                    nominal_quota=format_quantity(resource, quota.nominal),
                    borrowing_limit=fmt(quota.borrowing_limit),
                    lending_limit=fmt(quota.lending_limit),
                    total=format_quantity(resource, book.used(name, fr)),
                    borrowed=format_quantity(resource, book.borrowed(name, fr)),
                    available=format_quantity(resource, book.available(name, fr)),
                )
            )
        share, dominant = book.dominant_resource_share(name)
        out.append(
            ClusterQueueStatus(
                name=name,
                cohort=cq.cohort,
                queueing_strategy=cq.queueing_strategy.value,
                weight=cq.weight,
                flavors_usage=list(flavors.items()),
                pending_workloads=pending[name],
                admitted_workloads=holding[name],
                weighted_share=share,
                dominant_resource=dominant,
                admission_mode=cq.admission_mode.value,
                stop_policy=cq.stop_policy.value,
                cohort_path=tuple(book.cohort_chain(name)),
            )
        )
    return out


@dataclass(frozen=True)
class PendingWorkload:
    """Why a workload is not running yet, where it stands, and when it may start."""

    workload: Workload
    cluster_queue: str
    local_queue: str
    position: int  # 1-based: in its cluster queue (waiting for quota) or among admitted ones
    reason: str  # WaitingForQuota, NoFit, TopologyPlacementFailed, WaitingForGang, ...
    message: str
    estimated_start: datetime | None  # None: unknown (no expected ends to go by)


def pending_workloads(
    now: datetime | None = None,
    *,
    namespace: str | None = None,
    cluster_queue: str | None = None,
    speed: float | None = None,
) -> list[PendingWorkload]:
    """Every workload waiting for quota or for nodes, with its position in its queue, the reason
    and an estimated start from running workloads' expected ends (a simulated pod's duration_s,
    scaled by the simulator's speed, else the workload's maximumExecutionTimeSeconds)."""
    now = now or timezone.now()
    speed = speed or settings.SIM_SPEED
    setup = queue_setup()
    admitted = admitted_workloads()
    book = quota_book(setup, admitted)
    queued = queued_workloads(setup)
    unplaced = list(
        Workload.objects.filter(state=Workload.State.ADMITTED, pods__phase=Pod.Phase.PENDING)
        .distinct()
        .select_related("tenant", "cluster_queue")
        .order_by("-priority", "created_at", "id")
    )
    active_ids = (
        [w.pk for w, _ in queued] + [w.pk for w in unplaced] + [int(a.key) for a in admitted]
    )
    ends, durations, gpu_held = _expected_times(active_ids, now, speed)
    by_pk = {int(a.key): a for a in admitted}

    def end_of(pk: int) -> float | None:
        return ends.get(pk)

    out: list[PendingWorkload] = []
    positions = ordering.positions(queue_orders(setup, book, queued, admitted))
    estimates: dict[str, float | None] = {}
    for name, cq in setup.cluster_queues.items():
        members = set(book.members(name))
        free: dict[str, int] = defaultdict(int)
        for flavor, resource, _ in cq.flavor_resources():
            free[resource] += book.available(name, (flavor, resource))
        running = [
            Running(end_of(int(a.key)), _by_resource(a.usage))
            for a in admitted
            if a.cluster_queue in members
        ]
        order = sorted(
            (q for _, q in queued if q is not None and q.cluster_queue == name),
            key=lambda q: positions.get(q.key, 0),
        )
        estimates.update(
            estimate_starts(
                now.timestamp(),
                free,
                running,
                [
                    Queued(
                        q.key,
                        {
                            r: amount
                            for r, amount in q.demand.amounts(cq.covered).items()
                            if r in cq.covered
                        },
                        durations.get(int(q.key)),
                    )
                    for q in order
                ],
            )
        )
    for w, q in queued:
        if q is None:
            lq_key = f"{w.tenant.namespace}/{w.queue_name}"
            reason = w.pending_reason or queue_admission.INADMISSIBLE
            message = w.reason or f"LocalQueue {lq_key} does not exist"
            out.append(PendingWorkload(w, "", lq_key, 0, reason, message, None))
            continue
        start = estimates.get(q.key)
        out.append(
            PendingWorkload(
                w,
                q.cluster_queue,
                q.local_queue,
                positions.get(q.key, 0),
                w.pending_reason or queue_admission.WAITING_FOR_QUOTA,
                w.reason,
                _when(start),
            )
        )
    # Admitted, waiting for nodes: the cluster's GPUs free up as running workloads end.
    capacity = 1000 * Gpu.objects.exclude(sharing="mig").count()
    used = sum(Gpu.objects.values_list("used_milli", flat=True))
    running_all = [
        Running(end_of(pk), {GPU: gpu_held.get(pk, 0)})
        for pk in set(by_pk) | {w.pk for w in unplaced}
        if gpu_held.get(pk, 0)
    ]
    demand = pod_facts(w.pk for w in unplaced)
    placement_estimates = estimate_starts(
        now.timestamp(),
        {GPU: max(0, capacity - used)},
        running_all,
        [
            Queued(
                str(w.pk),
                {GPU: demand[w.pk].demand.gpu_milli} if w.pk in demand else {},
                durations.get(w.pk),
            )
            for w in unplaced
        ],
    )
    for k, w in enumerate(unplaced, start=1):
        out.append(
            PendingWorkload(
                w,
                w.cluster_queue.name if w.cluster_queue else "",
                f"{w.tenant.namespace}/{w.queue_name}",
                k,
                w.pending_reason or queue_admission.NO_FIT,
                w.reason,
                _when(placement_estimates.get(str(w.pk))),
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


def _by_resource(usage: Mapping[FlavorResource, int]) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for (_, resource), amount in usage.items():
        out[resource] += amount
    return dict(out)


def _when(timestamp: float | None) -> datetime | None:
    return None if timestamp is None else datetime.fromtimestamp(timestamp, tz=UTC)


def _expected_times(
    workload_ids: Sequence[int], now: datetime, speed: float
) -> tuple[dict[int, float | None], dict[int, float | None], dict[int, int]]:
    """Per workload: when it is expected to end (running or admitted ones), how long it is
    expected to run (wall seconds), and the GPU milli its placed pods hold."""
    ends: dict[int, float | None] = {}
    durations: dict[int, float | None] = {}
    held: dict[int, int] = defaultdict(int)
    pods: dict[int, list[tuple[str, datetime | None, dict[str, Any], int]]] = defaultdict(list)
    for wid, phase, started, simulation, gpus, milli in Pod.objects.filter(
        workload_id__in=list(workload_ids), phase__in=Pod.ACTIVE_PHASES
    ).values_list("workload_id", "phase", "started_at", "simulation", "gpus", "gpu_milli"):
        pods[wid].append((phase, started, simulation or {}, gpus * 1000 + milli))
    limits = dict(
        Workload.objects.filter(pk__in=list(workload_ids)).values_list(
            "pk", "maximum_execution_time_s"
        )
    )
    admitted_at = dict(
        Workload.objects.filter(pk__in=list(workload_ids)).values_list("pk", "admitted_at")
    )
    for wid in workload_ids:
        rows = pods.get(wid, [])
        sims = [
            float(sim.get("duration_s") or 0) + float(sim.get("lost_s") or 0)
            for _, _, sim, _ in rows
        ]
        if rows and all(d > 0 for d in sims):
            durations[wid] = max(sims) / speed
            pod_ends = [
                ((started or now) + timedelta(seconds=d / speed)).timestamp()
                for (_, started, _, _), d in zip(rows, sims, strict=True)
            ]
            ends[wid] = max(pod_ends)
        elif limits.get(wid):
            limit = float(limits[wid] or 0)
            durations[wid] = limit
            start = admitted_at.get(wid) or now
            ends[wid] = (start + timedelta(seconds=limit)).timestamp()
        else:
            durations[wid] = None
            ends[wid] = None
        for phase, _, _, milli in rows:
            if phase in Pod.PLACED_PHASES:
                held[wid] += milli
    return ends, durations, held
