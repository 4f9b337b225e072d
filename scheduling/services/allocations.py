"""What allocations hold: the counters that say what nodes, NUMA nodes and GPUs hold (raised only
by checked updates, scheduling/models.py), releasing, lent shares moving onto freed capacity,
expired reservations."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime

from django.db import connection, transaction
from django.db.models import F

from scheduling import events
from scheduling.core.types import (
    MILLI_PER_GPU,
)
from scheduling.models import (
    Allocation,
    Gpu,
    GpuAssignment,
    Node,
    NodeNuma,
    Pod,
)


def add_counts(
    model: type[Node] | type[Gpu] | type[NodeNuma],
    column: str,
    deltas: dict[int, int],
    *,
    capacity: str | None = None,
) -> bool:
    """Add each row's delta to `column`, in one statement. With `capacity` (the column it may not
    pass) the update is checked: a row that would pass it is left alone, and False says so (the
    caller rolls back). Increments, not absolute values: the check judges the true totals even if
    another writer changed them since the caller's snapshot (the UPDATE locks and re-reads each
    row).

    The rows and their deltas are a VALUES list joined to the table (UPDATE ... FROM, on
    PostgreSQL and SQLite alike): a CASE with a branch per row costs the database a scan of the
    branches for each row and Django a resolved expression per branch, quadratic in the batch.
    The VALUES are integer literals written here (`int()` of each, never text from outside); their
    columns are read by their default names (column1, column2 on both), since a WITH or a column
    alias list is what SQLite or Python's sqlite3 (no row count after WITH) do not take.

    The rows are locked in id order first (one `SELECT ... ORDER BY id FOR NO KEY UPDATE`, where
    the database locks rows): the UPDATE alone locks them in whatever order its plan joins them,
    so two writers changing the same counters could each hold a row the other waits for. Callers
    change the counter tables in one order too (docs/architecture.md, "Lock order"): Node, then
    NodeNuma, then Gpu."""
    deltas = {int(pk): int(d) for pk, d in sorted(deltas.items()) if d}
    if not deltas:
        return True
    if len(deltas) > 1 and connection.features.has_select_for_update:
        list(
            model.objects.filter(pk__in=list(deltas))
            .order_by("id")
            .select_for_update(no_key=True)
            .values_list("id", flat=True)
        )
    table = connection.ops.quote_name(model._meta.db_table)
    target = connection.ops.quote_name(column)
    values = ", ".join(f"({pk}, {delta})" for pk, delta in deltas.items())
    guard = ""
    if capacity is not None:
        guard = f" AND t.{target} + d.delta <= t.{connection.ops.quote_name(capacity)}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} AS t SET {target} = t.{target} + d.delta FROM "
            f"(SELECT column1 AS id, column2 AS delta FROM (VALUES {values}) AS v) AS d "
            f"WHERE t.id = d.id{guard}"
        )
        return cursor.rowcount == len(deltas)


def numa_counts(charges: Iterable[tuple[int, Sequence[int]]], *, sign: int) -> dict[int, int]:
    """Per NodeNuma row, what (node id, CPU milli per NUMA node) charges add up to."""
    charges = [(node_id, list(per_numa)) for node_id, per_numa in charges]
    rows = {
        (node_id, index): pk
        for node_id, index, pk in NodeNuma.objects.filter(
            node_id__in={node_id for node_id, _ in charges}
        ).values_list("node_id", "index", "pk")
    }
    out: dict[int, int] = defaultdict(int)
    for node_id, per_numa in charges:
        for index, amount in enumerate(per_numa):
            pk = rows.get((node_id, index))
            if pk is not None and amount:
                out[pk] += sign * int(amount)
    return dict(out)


def allocations_release(allocations: Iterable[Allocation], *, reason: str, now: datetime) -> None:
    """Give back what allocations hold: counters down, rows inactive, one event each. The
    allocations' own columns are all it reads (no need to load their nodes or pods with them)."""
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
    # The counters in the one lock order (add_counts): nodes, NUMA nodes, GPUs, as a bind.
    add_counts(Node, "cpu_used_milli", cpu_delta)
    add_counts(Node, "memory_used_mib", memory_delta)
    add_counts(
        NodeNuma,
        "cpu_used_milli",
        numa_counts(((a.node_id, a.numa_cpu_milli) for a in allocations), sign=-1),
    )
    add_counts(Gpu, "used_milli", gpu_delta)
    add_counts(Gpu, "lent_milli", lent_delta)
    gpus_of: dict[int, list[int]] = defaultdict(list)
    for assignment in assignments:
        gpus_of[assignment.allocation_id].append(assignment.gpu.index)
    # Names by id, once each: thousands of allocations share a few nodes, and loading a node's
    # or a pod's whole row per allocation (their JSON columns) was most of a large release.
    node_names = dict(
        Node.objects.filter(pk__in={a.node_id for a in allocations}).values_list("pk", "name")
    )
    pod_uids = dict(
        Pod.objects.filter(pk__in=[a.pod_id for a in allocations]).values_list("pk", "uid")
    )
    events.publish(
        *(
            events.AllocationReleased(
                pod_uid=str(pod_uids[a.pod_id]),
                node=node_names[a.node_id],
                gpus=sorted(gpus_of[a.pk]),
                reason=reason,
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
