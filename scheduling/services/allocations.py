"""What allocations hold: the counters the CHECK constraints judge, releasing, lent shares
moving onto freed capacity, expired reservations."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import transaction
from django.db.models import Case, F, IntegerField, Value, When

from scheduling import events
from scheduling.core.types import (
    MILLI_PER_GPU,
)
from scheduling.models import (
    Allocation,
    Gpu,
    GpuAssignment,
    Node,
    Pod,
)


def add_counts(model: type[Node] | type[Gpu], column: str, deltas: dict[int, int]) -> None:
    deltas = {pk: d for pk, d in deltas.items() if d}
    if not deltas:
        return
    increment = Case(
        *(When(pk=pk, then=Value(delta)) for pk, delta in deltas.items()),
        default=Value(0),
        output_field=IntegerField(),
    )
    model.objects.filter(pk__in=list(deltas)).update(**{column: F(column) + increment})


def allocations_release(allocations: Iterable[Allocation], *, reason: str, now: datetime) -> None:
    """Give back what allocations hold: counters down, rows inactive, one event each."""
    allocations = list(allocations)
    if not allocations:
        return
    ids = [a.pk for a in allocations]
    assignments = list(
        GpuAssignment.objects.filter(allocation_id__in=ids, active=True).select_related("gpu")
    )
    gpu_delta: dict[int, int] = defaultdict(int)
    lent_delta: dict[int, int] = defaultdict(int)
    for assignment in assignments:
        (lent_delta if assignment.reclaimed else gpu_delta)[assignment.gpu_id] -= assignment.milli
    cpu_delta: dict[int, int] = defaultdict(int)
    memory_delta: dict[int, int] = defaultdict(int)
    for allocation in allocations:
        cpu_delta[allocation.node_id] -= allocation.cpu_milli
        memory_delta[allocation.node_id] -= allocation.memory_mib
    GpuAssignment.objects.filter(pk__in=[a.pk for a in assignments]).update(active=False)
    Allocation.objects.filter(pk__in=ids).update(
        state=Allocation.State.RELEASED, active=False, released_at=now, release_reason=reason
    )
    add_counts(Gpu, "used_milli", gpu_delta)
    add_counts(Gpu, "lent_milli", lent_delta)
    add_counts(Node, "cpu_used_milli", cpu_delta)
    add_counts(Node, "memory_used_mib", memory_delta)
    gpus_of: dict[int, list[int]] = defaultdict(list)
    for assignment in assignments:
        gpus_of[assignment.allocation_id].append(assignment.gpu.index)
    events.publish(
        *(
            events.AllocationReleased(
                pod_uid=str(a.pod.uid), node=a.node.name, gpus=sorted(gpus_of[a.pk]), reason=reason
            )
            for a in allocations
        )
    )
    _promote_lent(gpu_ids=[gpu_id for gpu_id, delta in gpu_delta.items() if delta])


def _promote_lent(*, gpu_ids: Sequence[int]) -> None:
    """Where owners left and a GPU now lends more than its owners hold, lent shares move onto
    the free capacity (smallest first, while they fit): with nobody left to lend them the
    capacity, they would otherwise sit on free milli that a new owner could be given."""
    for gpu in Gpu.objects.filter(pk__in=gpu_ids, lent_milli__gt=F("used_milli")):
        lent = GpuAssignment.objects.filter(gpu=gpu, active=True, reclaimed=True).select_related(
            "allocation__pod", "allocation__node"
        )
        used, lent_milli = gpu.used_milli, gpu.lent_milli
        promoted: list[GpuAssignment] = []
        for assignment in sorted(lent, key=lambda a: (a.milli, a.pk)):
            if lent_milli <= used or used + assignment.milli > MILLI_PER_GPU:
                break
            used, lent_milli = used + assignment.milli, lent_milli - assignment.milli
            promoted.append(assignment)
        if not promoted:
            continue
        GpuAssignment.objects.filter(pk__in=[a.pk for a in promoted]).update(reclaimed=False)
        moved = sum(a.milli for a in promoted)
        Gpu.objects.filter(pk=gpu.pk).update(
            used_milli=F("used_milli") + moved, lent_milli=F("lent_milli") - moved
        )
        events.publish(
            *(
                events.AllocationPromoted(
                    pod_uid=str(a.allocation.pod.uid), node=a.allocation.node.name, gpu=gpu.index
                )
                for a in promoted
            )
        )


def reservations_expire(*, now: datetime) -> int:
    """Release reservations whose time ran out (a gang that never completed, a crashed binder)."""
    with transaction.atomic():
        expired = list(
            Allocation.objects.filter(
                state=Allocation.State.RESERVED, expires_at__lt=now
            ).select_related("node", "pod")
        )
        allocations_release(expired, reason="reservation expired", now=now)
        Pod.objects.filter(pk__in=[a.pod_id for a in expired]).update(phase=Pod.Phase.PENDING)
    return len(expired)
