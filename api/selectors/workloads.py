"""A tenant's workloads: filtered lists, one workload, its pods, placements and decisions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, QuerySet

from api.exceptions import NotFound
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
    return qs.order_by("-id")


def workload_get(tenant: Tenant, name: str) -> Workload:
    """The tenant's workload; another tenant's is as absent as a missing one (404, never 403)."""
    workload = Workload.objects.filter(tenant=tenant, name=name).select_related("tenant").first()
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


def workload_pods(workload: Workload) -> list[PodView]:
    """Every pod with where it runs (its active allocation, else its last released one)."""
    pods = list(workload.pods.order_by("pod_set", "id"))
    allocations: dict[int, Allocation] = {}
    for allocation in (
        Allocation.objects.filter(pod__workload=workload)
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


def workload_decisions(workload: Workload, limit: int = 50) -> list[PlacementDecision]:
    """The newest placement decisions of the workload's pods (the scheduler keeps a bounded
    number of them overall, so old ones may be gone)."""
    return list(
        PlacementDecision.objects.filter(pod__workload=workload)
        .select_related("pod")
        .order_by("-id")[:limit]
    )
