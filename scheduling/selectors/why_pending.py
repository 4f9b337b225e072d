"""Why a pod waits, read from the structured explanation the scheduler stores with each failed
attempt (scheduling/services/decisions.py `why_pending`): the one read behind the REST API's
pending status and the dashboard's Queues and Placements pages. Nothing is parsed back out of
the kube-style message text."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scheduling.models import Pod

MAX_EXAMPLES = 8  # node names shown per reason (as many as the stored groups name)


@dataclass(frozen=True)
class ReasonGroup:
    """Nodes that first failed `plugin` for `reason` (each node counted once): one group per
    reason, however many of its nodes load could free."""

    plugin: str
    reason: str
    nodes: int
    unresolvable: bool  # no pod finishing or preempted makes any of these nodes fit
    examples: tuple[str, ...]
    resolvable: int = 0  # of `nodes`, those pods finishing or preempted could make fit


@dataclass(frozen=True)
class WhyPending:
    summary: str  # kube-scheduler's FailedScheduling line
    nodes: int
    feasible: int
    groups: tuple[ReasonGroup, ...]  # most nodes first
    failed_by_plugin: tuple[tuple[str, int], ...]  # nodes each filter rejected at all
    resolvable_nodes: int  # nodes that failed only for reasons a change of load removes
    nominated: str | None  # preemption's proposed node
    status: str

    @property
    def would_fit(self) -> str:
        """What would make the pod fit, in a sentence."""
        if self.feasible:
            return f"{self.feasible} node(s) pass every filter; it waits for its turn"
        if self.nominated:
            return f"would fit on {self.nominated} once the pods chosen for preemption leave"
        if self.resolvable_nodes:
            return (
                f"would fit on {self.resolvable_nodes} of {self.nodes} node(s) once pods "
                "running there finish or are preempted"
            )
        if self.groups:
            reasons = "; ".join(dict.fromkeys(g.reason for g in self.groups))
            return f"no node fits even empty: {reasons}"
        return self.status or "no node to try"


def read(doc: Mapping[str, Any] | None) -> WhyPending | None:
    """A stored explanation (decisions.why_pending's doc), None when there is none."""
    if not doc or "groups" not in doc:
        return None
    return WhyPending(
        summary=str(doc.get("summary", "")),
        nodes=int(doc.get("nodes", 0)),
        feasible=int(doc.get("feasible", 0)),
        groups=_merged(doc["groups"]),
        failed_by_plugin=tuple(
            (str(p.get("plugin", "")), int(p.get("nodes", 0))) for p in doc.get("plugins", ())
        ),
        resolvable_nodes=int(doc.get("resolvable_nodes", 0)),
        nominated=doc.get("nominated"),
        status=str(doc.get("status", "")),
    )


def _merged(groups: Iterable[Mapping[str, Any]]) -> tuple[ReasonGroup, ...]:
    """The stored groups (one per plugin, reason and whether load could free the nodes) as one
    group per plugin and reason, most nodes first: a reason is listed once with all its nodes."""
    merged: dict[tuple[str, str], ReasonGroup] = {}
    for g in groups:
        key = (str(g.get("plugin", "")), str(g.get("reason", "")))
        nodes = int(g.get("nodes", 0))
        fixed = bool(g.get("unresolvable", False))
        before = merged.get(key, ReasonGroup(*key, 0, True, ()))
        merged[key] = ReasonGroup(
            plugin=key[0],
            reason=key[1],
            nodes=before.nodes + nodes,
            unresolvable=before.unresolvable and fixed,
            examples=tuple(dict.fromkeys((*before.examples, *g.get("examples", ()))))[
                :MAX_EXAMPLES
            ],
            resolvable=before.resolvable + (0 if fixed else nodes),
        )
    return tuple(sorted(merged.values(), key=lambda g: -g.nodes))


def of_pod(pod: Pod) -> WhyPending | None:
    """The pod's last failed attempt, if that is still why it waits: the doc is current while its
    summary is the pod's last reason (a bind, an eviction or a refused bind rewrites that)."""
    return current(pod.pending_explanation, pod.last_reason)


def current(doc: Mapping[str, Any] | None, last_reason: str) -> WhyPending | None:
    """`doc` read, if it still explains `last_reason` (of_pod for values read without a Pod)."""
    why = read(doc)
    if why is None or why.summary != last_reason:
        return None
    return why


def as_doc(why: WhyPending | None) -> dict[str, Any] | None:
    """JSON for the dashboard (the same fields, plus the sentence)."""
    if why is None:
        return None
    return {
        "summary": why.summary,
        "nodes": why.nodes,
        "feasible": why.feasible,
        "groups": [
            {
                "plugin": g.plugin,
                "reason": g.reason,
                "nodes": g.nodes,
                "unresolvable": g.unresolvable,
                "resolvable": g.resolvable,
                "examples": list(g.examples),
            }
            for g in why.groups
        ],
        "failed_by_plugin": [list(p) for p in why.failed_by_plugin],
        "resolvable_nodes": why.resolvable_nodes,
        "nominated": why.nominated,
        "would_fit": why.would_fit,
    }
