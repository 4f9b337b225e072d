"""A tenant's workloads: filtered lists, one workload, its Kueue-shaped status (conditions, pod set
assignments), its pods, placements and decisions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from api.exceptions import NotFound
from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing.resources import CPU, MEMORY, format_quantity
from scheduling.core.types import GPU_RESOURCE, MIG_RESOURCE_PREFIX, MILLI_PER_GPU
from scheduling.models import (
    Allocation,
    GpuAssignment,
    PlacementDecision,
    Pod,
    Tenant,
    Workload,
)

# --- workloads ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadFilters:
    states: Sequence[str] = ()
    queue_name: str | None = None
    priority_class_name: str | None = None
    service_class: str | None = None
    name_prefix: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None


def workloads_of(tenant: Tenant, filters: WorkloadFilters | None = None) -> QuerySet[Workload]:
    """The tenant's workloads, newest first (ordered by id, which the cursor pages on)."""
    qs = Workload.objects.filter(tenant=tenant)
    f = filters or WorkloadFilters()
    if f.states:
        qs = qs.filter(state__in=list(f.states))
    if f.queue_name:
        qs = qs.filter(queue_name=f.queue_name)
    if f.priority_class_name:
        qs = qs.filter(priority_class_name=f.priority_class_name)
    if f.service_class:
        qs = qs.filter(service_class=f.service_class)
    if f.name_prefix:
        qs = qs.filter(name__startswith=f.name_prefix)
    if f.created_after:
        qs = qs.filter(created_at__gte=f.created_after)
    if f.created_before:
        qs = qs.filter(created_at__lt=f.created_before)
    return qs.select_related("cluster_queue").order_by("-id")


def workload_get(tenant: Tenant, name: str) -> Workload:
    """The tenant's workload; another tenant's is as absent as a missing one (404, never 403)."""
    workload = (
        Workload.objects.filter(tenant=tenant, name=name)
        .select_related("tenant", "cluster_queue")
        .first()
    )
    if workload is None:
        raise NotFound(f"workload {name!r} not found")
    return workload


def pod_phase_counts(workload_ids: Iterable[int]) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = defaultdict(dict)
    rows = (
        Pod.objects.filter(workload_id__in=list(workload_ids))
        .values_list("workload_id", "phase")
        .annotate(n=Count("id"))
        .values_list("workload_id", "phase", "n")
    )
    for workload_id, phase, n in rows:
        counts[workload_id][phase] = n
    return counts


# --- pods and placements ------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuHeld:
    index: int
    uuid: str
    model: str
    milli: int
    mig_slot: int | None


@dataclass(frozen=True)
class PodView:
    pod: Pod
    node: str | None
    allocation_state: str | None
    scope: str | None
    gpus: list[GpuHeld] = field(default_factory=list)


def workload_pods(workload: Workload, pods: Sequence[Pod]) -> list[PodView]:
    """The pods (a page of the workload's) with where each runs (its active allocation, else its
    last released one)."""
    allocations: dict[int, Allocation] = {}
    for allocation in (
        Allocation.objects.filter(pod__in=pods)
        .select_related("node")
        .order_by("pod_id", "-active", "-id")
    ):
        allocations.setdefault(allocation.pod_id, allocation)
    held: dict[int, list[GpuHeld]] = defaultdict(list)
    for a in (
        GpuAssignment.objects.filter(allocation_id__in=[a.pk for a in allocations.values()])
        .select_related("gpu")
        .order_by("gpu__index", "mig_slot")
    ):
        held[a.allocation_id].append(
            GpuHeld(a.gpu.index, a.gpu.uuid, a.gpu.model, a.milli, a.mig_slot)
        )
    views = []
    for pod in pods:
        held_by = allocations.get(pod.pk)
        views.append(
            PodView(
                pod=pod,
                node=held_by.node.name if held_by else None,
                allocation_state=held_by.state if held_by else None,
                scope=(held_by.scope or None) if held_by else None,
                gpus=held.get(held_by.pk, []) if held_by else [],
            )
        )
    return views


def workload_decisions(workload: Workload) -> QuerySet[PlacementDecision]:
    """The placement decisions of the workload's pods, newest first (the scheduler keeps a
    bounded number of them overall, so old ones may be gone)."""
    return (
        PlacementDecision.objects.filter(pod__workload=workload)
        .select_related("pod")
        .order_by("-id")
    )


# --- Kueue's status: conditions and pod set assignments -----------------------------------------

EVICTED_REASONS = (
    queue_admission.PREEMPTED,
    queue_admission.PODS_READY_TIMEOUT,
    queue_admission.INACTIVE_WORKLOAD,
    queue_admission.CLUSTER_QUEUE_STOPPED,
    queue_admission.LOCAL_QUEUE_STOPPED,
)
_HOLDING = (Workload.State.ADMITTED, Workload.State.RUNNING)
_FINISHED_REASONS = {
    Workload.State.FINISHED: ("Succeeded", "all pods succeeded"),
    Workload.State.FAILED: ("Failed", "a pod failed"),
    Workload.State.CANCELLED: ("Cancelled", "cancelled"),
}


@dataclass(frozen=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str
    at: datetime | None


def workload_conditions(
    w: Workload, pods: Mapping[str, int], now: datetime | None = None
) -> list[Condition]:
    """Kueue's Workload conditions, derived from what the scheduler keeps: QuotaReserved and
    Admitted (one and the same here: gpusched has no admission checks), PodsReady while it holds
    quota, Evicted and Requeued once it was evicted, Finished once it ended. A workload that ended
    before it was ever admitted never reports quota reserved."""
    now = now or timezone.now()
    holding = w.state in _HOLDING
    out: list[Condition] = []
    cq = w.cluster_queue.name if w.cluster_queue is not None else ""
    if holding:
        where = f"in ClusterQueue {cq}" if cq else "(no ClusterQueue: admitted as submitted)"
        out += [
            Condition(
                "QuotaReserved", True, "QuotaReserved", f"quota reserved {where}", w.admitted_at
            ),
            Condition("Admitted", True, "Admitted", f"admitted {where}", w.admitted_at),
        ]
    elif w.state == Workload.State.PENDING:
        since = w.evicted_at or w.created_at
        message = w.reason or "waiting for quota reservation"
        out += [
            Condition("QuotaReserved", False, w.pending_reason or "Pending", message, since),
            Condition("Admitted", False, "NoReservation", "the quota is not reserved", since),
        ]
    elif w.admitted_at is not None:  # ended while admitted: what it had, as Kueue keeps it
        out += [
            Condition("QuotaReserved", True, "QuotaReserved", "quota was reserved", w.admitted_at),
            Condition("Admitted", True, "Admitted", "was admitted", w.admitted_at),
        ]
    else:
        what = _FINISHED_REASONS[Workload.State(w.state)][0].lower()
        out += [
            Condition(
                "QuotaReserved",
                False,
                "NoReservation",
                f"{what} before quota was reserved",
                w.finished_at or w.created_at,
            ),
            Condition(
                "Admitted",
                False,
                "NoReservation",
                f"{what} before admission",
                w.finished_at or w.created_at,
            ),
        ]
    if holding:
        active = sum(pods.get(p, 0) for p in Pod.ACTIVE_PHASES)
        running = pods.get(Pod.Phase.RUNNING, 0)
        ready = active > 0 and running == active
        out.append(
            Condition(
                "PodsReady",
                ready,
                "PodsReady" if ready else "PodsNotReady",
                f"{running}/{active} pods running",
                w.admitted_at,
            )
        )
    if w.evictions and w.eviction_reason:
        readmitted = holding and w.admitted_at is not None and w.evicted_at is not None
        out.append(
            Condition(
                "Evicted",
                not readmitted,
                "QuotaReserved" if readmitted else w.eviction_reason,
                f"admitted again after its eviction ({w.eviction_reason})"
                if readmitted
                else f"evicted ({w.eviction_reason}), {w.evictions} time(s) in all",
                w.admitted_at if readmitted else w.evicted_at,
            )
        )
    if w.state in Workload.ACTIVE_STATES and (w.evictions or not w.active):
        out.append(_requeued(w, now))
    if w.state not in Workload.ACTIVE_STATES:
        reason, message = _FINISHED_REASONS[Workload.State(w.state)]
        out.append(Condition("Finished", True, reason, message, w.finished_at))
    return out


def _requeued(w: Workload, now: datetime) -> Condition:
    """Kueue's Requeued: False while deactivated or backing off after a PodsReadyTimeout, True
    once it is back in its queue."""
    if not w.active:
        return Condition(
            "Requeued",
            False,
            queue_admission.INACTIVE_WORKLOAD,
            "deactivated (active: false): not queued",
            w.evicted_at,
        )
    if w.requeue_at is not None and w.requeue_at > now and w.state == Workload.State.PENDING:
        return Condition(
            "Requeued",
            False,
            w.eviction_reason,
            f"backing off: queued again at {w.requeue_at.isoformat()} "
            f"(after {w.requeue_count} pods-ready timeout(s))",
            w.evicted_at,
        )
    if w.requeue_at is not None:
        return Condition(
            "Requeued", True, "BackoffFinished", "queued again after the backoff", w.requeue_at
        )
    return Condition(
        "Requeued",
        True,
        w.eviction_reason or "Requeued",
        "back in its queue after its eviction",
        w.evicted_at,
    )


@dataclass(frozen=True)
class PodSetAssignment:
    """Kueue's status.admission.podSetAssignments[]: a pod set's flavors and what it charges."""

    name: str
    flavors: dict[str, str]  # resource -> flavor
    resource_usage: dict[str, str]  # resource -> quantity, the whole pod set
    count: int


def pod_set_assignments(workloads: Sequence[Workload]) -> dict[int, list[PodSetAssignment]]:
    """For each admitted workload (one query): one assignment per pod set of its spec, as
    Kueue's CRD requires (size(spec.podSets) == size(status.admission.podSetAssignments)), each
    with the flavor its workload was assigned per resource and its pods' requests: the unfinished
    pods' while any is left, else all its pods' (what an ended workload had, as Kueue keeps its
    admission), else, pods not made yet, the spec's count and no usage."""
    admitted = {w.pk: w for w in workloads if w.cluster_queue_id is not None}
    rows = (
        Pod.objects.filter(workload_id__in=list(admitted))
        .values("workload_id", "pod_set", "mig_profile", "phase")
        .annotate(
            n=Count("id"),
            cpu=Sum("cpu_milli"),
            memory=Sum("memory_mib"),
            gpus=Sum("gpus"),
            milli=Sum("gpu_milli"),
            mig=Sum("mig_count"),
        )
        .order_by("workload_id", "pod_set")
    )
    every: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    active: dict[tuple[int, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        sums = [every[(row["workload_id"], row["pod_set"])]]
        if row["phase"] in Pod.ACTIVE_PHASES:
            sums.append(active[(row["workload_id"], row["pod_set"])])
        for amounts in sums:
            amounts["pods"] += row["n"]
            amounts[CPU] += row["cpu"] or 0
            amounts[MEMORY] += row["memory"] or 0
            amounts[GPU_RESOURCE] += (row["gpus"] or 0) * MILLI_PER_GPU + (row["milli"] or 0)
            if row["mig"]:
                amounts[f"{MIG_RESOURCE_PREFIX}{row['mig_profile']}"] += row["mig"]
    out: dict[int, list[PodSetAssignment]] = defaultdict(list)
    for wid, w in admitted.items():
        flavors = dict(w.flavors or {})
        for spec in w.pod_sets:
            key = (wid, spec["name"])
            amounts = dict(active.get(key) or every.get(key) or {"pods": spec["count"]})
            count = amounts.pop("pods")
            shown = {r: a for r, a in amounts.items() if a}
            out[wid].append(
                PodSetAssignment(
                    name=spec["name"],
                    flavors={r: f for r, f in flavors.items() if r in shown} or flavors,
                    resource_usage={r: format_quantity(r, a) for r, a in sorted(shown.items())},
                    count=count,
                )
            )
    return out
