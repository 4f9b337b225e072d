"""What pods really hold, taken as the truth: where a node gave a pod other GPUs than were recorded
(the classic device plugin picks its own; a DRA claim allocated before), the pod's allocation is
moved onto the observed GPUs of its node, with a `GpusObserved` event in the same transaction, so
later placements plan on what is really free (the scheduler's cache rebuilds on that event).

Whole GPUs only (a share or a MIG slot is placed by a device plugin that reads gpusched's choice).
A batch is applied together, so two pods recorded on each other's GPUs swap cleanly. A correction
is refused, with the reason, when the observed GPUs are not the node's, their number differs from
what the pod holds, or another pod (not corrected in the same batch) holds one of them.
The CPU charged to NUMA nodes stays as it was.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, transaction

from scheduling import events
from scheduling.bulk import update_rows
from scheduling.core.types import MILLI_PER_GPU
from scheduling.models import Allocation, Gpu, GpuAssignment, Pod
from scheduling.selectors.gpu_holders import Mismatch, PodName, mismatches
from scheduling.services.allocations import add_counts

logger = logging.getLogger(__name__)

# The `source` of the corrections assignments_reconcile makes (GpusObserved events, the Node page).
DCGM = "dcgm"


@dataclass(frozen=True)
class ObservedResult:
    corrected: tuple[str, ...] = ()  # pod uids whose GPU ids moved
    refused: Mapping[str, str] = field(default_factory=dict)  # pod uid -> why not


def gpus_observe(*, observed: Mapping[Pod, Sequence[int]], source: str) -> ObservedResult:
    """Move each pod's whole-GPU allocation onto the GPU indices it was observed holding."""
    refused: dict[str, str] = {}
    with transaction.atomic():
        allocations = {
            a.pod_id: a
            for a in Allocation.objects.select_for_update()
            .filter(pod__in=list(observed), active=True)
            .select_related("node", "pod")
        }
        rows_of: dict[int, list[GpuAssignment]] = defaultdict(list)
        for row in GpuAssignment.objects.filter(
            allocation__in=list(allocations.values()), active=True
        ).select_related("gpu"):
            rows_of[row.allocation_id].append(row)
        moves: list[tuple[Allocation, list[GpuAssignment], list[Gpu]]] = []
        for pod, indices in observed.items():
            allocation = allocations.get(pod.pk)
            if allocation is None:
                refused[str(pod.uid)] = "holds nothing"
                continue
            rows = sorted(rows_of[allocation.pk], key=lambda r: r.gpu.index)
            wanted = sorted(set(indices))
            if [r.gpu.index for r in rows] == wanted:
                continue
            why = _why_not(rows, wanted)
            if why:
                refused[str(pod.uid)] = why
                continue
            found = {g.index: g for g in Gpu.objects.filter(node=allocation.node, index__in=wanted)}
            if len(found) != len(wanted):
                missing = sorted(set(wanted) - set(found))
                refused[str(pod.uid)] = f"node {allocation.node.name} has no GPU {missing[0]}"
                continue
            moves.append((allocation, rows, [found[i] for i in wanted]))
        applied = _without_conflicts(moves, refused)
        payloads = [
            events.GpusObserved(
                pod_uid=str(allocation.pod.uid),
                node=allocation.node.name,
                recorded=[r.gpu.index for r in rows],
                observed=[g.index for g in gpus],
                source=source,
            )
            for allocation, rows, gpus in applied
        ]
        _move(applied)
        events.publish(*payloads)
    return ObservedResult(tuple(str(a.pod.uid) for a, _, _ in applied), refused)


@dataclass(frozen=True)
class ReconcileResult:
    mismatches: tuple[Mismatch, ...] = ()
    corrected: int = 0
    refused: Mapping[str, str] | None = None  # pod uid -> why not corrected


def assignments_reconcile(observed: Mapping[PodName, tuple[int, ...]]) -> ReconcileResult:
    """Detect the mismatches in one batch of DCGM readings (the whole GPUs each labelled pod
    holds, by node: telemetry.holders.observed_from_samples) and take the observed GPUs as the
    truth. The telemetry ingester calls it every cycle (settings.TELEMETRY_HOLDERS_CHECK)."""
    found = mismatches(observed)
    if not found:
        return ReconcileResult()
    pods = {str(p.uid): p for p in Pod.objects.filter(uid__in=[m.pod_uid for m in found])}
    try:
        result = gpus_observe(
            observed={pods[m.pod_uid]: m.observed for m in found if m.pod_uid in pods},
            source=DCGM,
        )
    except DatabaseError as exc:
        # A correction is the exporter's advice: one the database refuses is reported and retried
        # next scrape, and never stops the rollups and freshness marks that follow in the cycle.
        logger.warning("GPU assignment corrections not applied: %s", exc)
        return ReconcileResult(tuple(found), 0, {m.pod_uid: f"not applied: {exc}" for m in found})
    return ReconcileResult(tuple(found), len(result.corrected), dict(result.refused))


def _without_conflicts(
    moves: Sequence[tuple[Allocation, list[GpuAssignment], list[Gpu]]], refused: dict[str, str]
) -> list[tuple[Allocation, list[GpuAssignment], list[Gpu]]]:
    """The moves that can all be applied together. A target GPU must be free once the accepted
    moves have left theirs; refusing one move can keep its pod on a GPU another move wanted, so
    this repeats until no refusal is added (a chain X onto Y's GPUs, Y refused, refuses X)."""
    targets = [g.pk for _, _, gpus in moves for g in gpus]
    holders: dict[int, list[GpuAssignment]] = defaultdict(list)
    for row in GpuAssignment.objects.filter(gpu_id__in=targets, active=True).select_related(
        "allocation__pod", "gpu"
    ):
        holders[row.gpu_id].append(row)
    wanted_by: dict[int, int] = defaultdict(int)
    for pk in targets:
        wanted_by[pk] += 1
    accepted = []
    for move in moves:
        allocation, _, gpus = move
        if any(wanted_by[g.pk] > 1 for g in gpus):
            refused[str(allocation.pod.uid)] = "another pod was observed on the same GPU"
        else:
            accepted.append(move)
    while True:
        leaving = {r.pk for _, rows, _ in accepted for r in rows}
        kept = []
        for move in accepted:
            allocation, _, gpus = move
            taken = next(
                (row for g in gpus for row in holders[g.pk] if row.pk not in leaving), None
            )
            if taken is None:
                kept.append(move)
            else:
                refused[str(allocation.pod.uid)] = (
                    f"GPU {taken.gpu.index} is held by pod {taken.allocation.pod.name}"
                )
        if len(kept) == len(accepted):
            return kept
        accepted = kept


def _why_not(rows: Sequence[GpuAssignment], wanted: Sequence[int]) -> str:
    if any(r.mig_slot is not None or r.milli != MILLI_PER_GPU for r in rows):
        return "holds a GPU share or MIG slot: only whole GPUs are corrected"
    if len(rows) != len(wanted):
        return f"observed on {len(wanted)} GPUs, holds {len(rows)}"
    return ""


def _move(applied: Sequence[tuple[Allocation, list[GpuAssignment], list[Gpu]]]) -> None:
    """Off every old GPU first, then onto the new ones: the one-holder-per-GPU constraint holds
    after each statement, swaps included. The counters move in one statement, each GPU by its
    net change (the CHECK judges each row's final value), so their rows are locked once, in the
    order of add_counts."""
    rows = [r for _, old, _ in applied for r in old]
    if not rows:
        return
    GpuAssignment.objects.filter(pk__in=[r.pk for r in rows]).update(active=False)
    moved: dict[int, int] = defaultdict(int)
    for _, old, gpus in applied:
        for row, gpu in zip(old, gpus, strict=True):
            moved[row.gpu_id] -= row.milli
            moved[gpu.pk] += row.milli
            row.gpu, row.active = gpu, True
    add_counts(Gpu, "used_milli", moved)
    update_rows(rows, ["gpu", "active"])
