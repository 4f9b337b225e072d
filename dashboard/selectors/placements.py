"""Placements page: the decision feed and one decision's full explanation."""

from __future__ import annotations

from collections.abc import Collection

from dashboard.selectors import Doc, iso
from scheduling.models import (
    PlacementDecision,
)

DECISIONS_SHOWN = 100


def decision_ids(limit: int | None = None) -> list[int]:
    newest = PlacementDecision.objects.order_by("-id").values_list("id", flat=True)
    return list(newest[: limit or DECISIONS_SHOWN])


def decisions(ids: Collection[int]) -> dict[str, Doc]:
    rows = PlacementDecision.objects.filter(id__in=list(ids)).select_related(
        "pod__workload__tenant"
    )
    return {str(row.pk): _decision_doc(row) for row in rows}


def _decision_doc(row: PlacementDecision) -> Doc:
    explanation = row.explanation or {}
    chosen = explanation.get("chosen") or {}
    return {
        "id": row.pk,
        "at": iso(row.created_at),
        "pod": row.pod.name,
        "uid": str(row.pod.uid),
        "tenant": row.pod.workload.tenant.name,
        "workload": row.pod.workload.name,
        "node": row.node,
        "outcome": row.outcome,
        "summary": row.summary,
        "nodes": explanation.get("nodes"),
        "feasible": explanation.get("feasible"),
        "score": chosen.get("total"),
    }


def decision_detail(decision_id: int) -> Doc | None:
    """One decision with its full explanation (per node and plugin), for the detail panel."""
    row = (
        PlacementDecision.objects.filter(pk=decision_id)
        .select_related("pod__workload__tenant")
        .first()
    )
    if row is None:
        return None
    return {**_decision_doc(row), "explanation": row.explanation or {}}
