"""Decision records: why a pod went where it went, or why it still waits."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import transaction

from scheduling import events
from scheduling.bulk import insert_rows, update_rows
from scheduling.core.scheduler import Decision
from scheduling.models import (
    PlacementDecision,
    Pod,
)

MAX_BACKOFF_S = 10.0


EXPLAINED_CANDIDATES = 5
EXAMPLE_NODES = 8  # nodes named per group of a pending pod's explanation


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
    changed: list[tuple[Pod, Decision]] = []  # a new reason: a decision record and an event
    explained: list[Pod] = []  # a new reason or explanation to write
    retried: list[Pod] = []  # only the attempt to write
    for pod, decision in failed:
        reason = decision.summary()[:1024]
        doc = why_pending(decision, summary=reason)
        if reason != pod.last_reason:
            changed.append((pod, decision))
        (
            explained if (reason, doc) != (pod.last_reason, pod.pending_explanation) else retried
        ).append(pod)
        pod.attempts += 1
        pod.last_reason = reason
        pod.pending_explanation = doc
        pod.last_attempt_at = now
        pod.nominated_node = nominated.get(str(pod.uid), "")
        pod.next_attempt_at = now + timedelta(
            seconds=min(MAX_BACKOFF_S, 0.5 * 2 ** min(pod.attempts, 8))
        )
    attempt = ["attempts", "last_attempt_at", "next_attempt_at", "nominated_node"]
    with transaction.atomic():
        # The explanation (a document per pod) is written only when it changed: a pod that waits
        # for the same reason, cycle after cycle, rewrites only its backoff.
        update_rows(explained, [*attempt, "last_reason", "pending_explanation"])
        update_rows(retried, attempt)
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
    scores and, for the chosen node, every plugin's verdict and the GPUs taken (with the
    topology scope the set reached); for a pod not placed, why_pending's breakdown."""
    doc: dict[str, Any] = {
        "nodes": len(decision.node_names),
        "feasible": decision.feasible_nodes,
        "summary": decision.summary(),
        "candidates": [],
    }
    if len(decision.candidates):
        order = np.argsort(-decision.totals, kind="stable")[:EXPLAINED_CANDIDATES]
        # Per column, not per cell: one numpy read per plugin instead of one per candidate.
        scores = {
            r.plugin: [round(float(v), 3) for v in r.scores[order].tolist()]
            for r in decision.scores
        }
        weights = {r.plugin: r.weight for r in decision.scores}
        totals = [round(float(v), 3) for v in decision.totals[order].tolist()]
        doc["candidates"] = [
            {
                "node": decision.node_names[row],
                "total": totals[k],
                "scores": {plugin: column[k] for plugin, column in scores.items()},
                "weights": weights,
            }
            for k, row in enumerate(decision.candidates[order].tolist())
        ]
    if decision.placement is not None:
        doc["chosen"] = decision.explain(decision.placement.node)
        placement = decision.placement
        doc["placement"] = {
            "gpus": list(placement.gpu_indices),
            "milli_per_gpu": placement.milli_per_gpu,
            "mig_slots": [list(slot) for slot in placement.mig_slots],
            "scope": placement.scope.value if placement.scope else None,
            "reclaimed": placement.reclaimed,
            "policy": decision.pod.topology_policy.value if decision.pod.topology_policy else None,
        }
    else:
        doc["pending"] = why_pending(decision, summary=doc["summary"])
    return doc


def why_pending(decision: Decision, *, summary: str) -> dict[str, Any]:
    """Why no node took the pod, as data (read by scheduling/selectors/why_pending.py for the REST
    API and the dashboard): each node grouped under the first filter it failed (the kube-scheduler
    message's counting), a few of its nodes by name; how many nodes failed each filter at all; and
    how many nodes failed only for reasons that finishing or preempting pods can remove (resolvable)
    against those that no change of load fixes (the node's kind, taints, topology). `summary` is the
    text written beside it, by which a reader knows the doc is current."""
    size = len(decision.node_names)
    doc: dict[str, Any] = {
        "summary": summary,
        "nodes": size,
        "feasible": decision.feasible_nodes,
        "status": decision.status.message(),
        "groups": [],
        "plugins": [],
        "resolvable_nodes": 0,
        "nominated": decision.nomination.nominated_node if decision.nomination else None,
    }
    if not decision.filters or not size:
        return doc
    first = np.zeros(size, dtype=np.int64)  # 1 + index into `groups`; 0: passed every filter
    never = np.zeros(size, dtype=bool)  # failed some filter for an unresolvable reason
    groups: list[dict[str, Any]] = []
    for plugin, verdicts in decision.filters:
        failed = verdicts.codes > 0
        if failed.any():
            doc["plugins"].append({"plugin": plugin, "nodes": int(failed.sum())})
        for code, reason in enumerate(verdicts.reasons, start=1):
            hit = verdicts.codes == code
            unresolvable = code <= len(verdicts.unresolvable) and verdicts.unresolvable[code - 1]
            if unresolvable:
                never |= hit
            new = hit & (first == 0)
            if new.any():
                groups.append(
                    {
                        "plugin": plugin,
                        "reason": reason,
                        "unresolvable": bool(unresolvable),
                        "nodes": int(new.sum()),
                        "examples": [
                            decision.node_names[int(i)] for i in np.flatnonzero(new)[:EXAMPLE_NODES]
                        ],
                    }
                )
                first[new] = len(groups)
    groups.sort(key=lambda g: (-g["nodes"], g["plugin"], g["reason"]))
    doc["groups"] = groups
    doc["resolvable_nodes"] = int(((first > 0) & ~never).sum())
    return doc


def decisions_prune(*, keep: int) -> int:
    """Keep the newest `keep` decision records."""
    cutoff = PlacementDecision.objects.order_by("-id").values_list("id", flat=True)[keep : keep + 1]
    boundary = list(cutoff)
    if not boundary:
        return 0
    deleted, _ = PlacementDecision.objects.filter(id__lte=boundary[0]).delete()
    return deleted
