"""Decision records: why a pod went where it went, or why it still waits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import transaction

from scheduling import events
from scheduling.bulk import insert_rows
from scheduling.core.scheduler import Decision
from scheduling.models import (
    PlacementDecision,
    Pod,
)

MAX_BACKOFF_S = 10.0


EXPLAINED_CANDIDATES = 5


def pods_unschedulable(
    *,
    failed: Sequence[tuple[Pod, Decision]],
    now: datetime,
    nominated: Mapping[str, str] | None = None,
) -> None:
    """Record a failed attempt: backoff grows with attempts; an event when the reason changes.
    `nominated` (pod uid -> node) are the pods waiting for a preemption's victims to go; every
    other failed pod loses its nomination."""
    nominated = nominated or {}
    if not failed:
        return
    changed: list[tuple[Pod, Decision]] = []
    for pod, decision in failed:
        reason = decision.summary()[:1024]
        if reason != pod.last_reason:
            changed.append((pod, decision))
        pod.attempts += 1
        pod.last_reason = reason
        pod.last_attempt_at = now
        pod.nominated_node = nominated.get(str(pod.uid), "")
        pod.next_attempt_at = now + timedelta(
            seconds=min(MAX_BACKOFF_S, 0.5 * 2 ** min(pod.attempts, 8))
        )
    with transaction.atomic():
        Pod.objects.bulk_update(
            [pod for pod, _ in failed],
            ["attempts", "last_reason", "last_attempt_at", "next_attempt_at", "nominated_node"],
        )
        insert_rows(
            [
                PlacementDecision(
                    pod=pod,
                    outcome=decision.status.code.value,
                    summary=pod.last_reason,
                    explanation=explanation(decision),
                )
                for pod, decision in changed
            ]
        )
        events.publish(
            *(
                events.PodUnschedulable.of(
                    pod,
                    reason=pod.last_reason,
                    attempts=pod.attempts,
                )
                for pod, _ in changed
            )
        )


def explanation(decision: Decision) -> dict[str, Any]:
    """What the API and dashboard show for a decision: counts, the best candidates' per-plugin
    scores and, for the chosen node, every plugin's verdict."""
    doc: dict[str, Any] = {
        "nodes": len(decision.node_names),
        "feasible": decision.feasible_nodes,
        "summary": decision.summary(),
        "candidates": [],
    }
    if len(decision.candidates):
        order = np.argsort(-decision.totals, kind="stable")[:EXPLAINED_CANDIDATES]
        doc["candidates"] = [
            {
                "node": decision.node_names[int(decision.candidates[j])],
                "total": round(float(decision.totals[j]), 3),
                "scores": {r.plugin: round(float(r.scores[j]), 3) for r in decision.scores},
                "weights": {r.plugin: r.weight for r in decision.scores},
            }
            for j in order
        ]
    if decision.node:
        doc["chosen"] = decision.explain(decision.node)
    return doc


def decisions_prune(*, keep: int) -> int:
    """Keep the newest `keep` decision records."""
    cutoff = PlacementDecision.objects.order_by("-id").values_list("id", flat=True)[keep : keep + 1]
    boundary = list(cutoff)
    if not boundary:
        return 0
    deleted, _ = PlacementDecision.objects.filter(id__lte=boundary[0]).delete()
    return deleted
