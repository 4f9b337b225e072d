"""Placements page: the decision feed and one decision's full explanation."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from dashboard.selectors import Doc, iso
from dashboard.selectors.cluster import node_domain
from scheduling.models import Node, PlacementDecision
from scheduling.selectors import why_pending

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
    """One decision with its full explanation (per node and plugin), the GPU set it chose read
    against the node's topology, the node's domain (block, rack) when the nodes carry a
    Topology's levels, and for a pod not placed the per-node breakdown of why
    (scheduling.selectors.why_pending, the read the REST API uses)."""
    row = (
        PlacementDecision.objects.filter(pk=decision_id)
        .select_related("pod__workload__tenant")
        .first()
    )
    if row is None:
        return None
    explanation = row.explanation or {}
    return {
        **_decision_doc(row),
        "explanation": explanation,
        "gpu_set": _gpu_set(row.node, explanation.get("placement")),
        "domain": node_domain(row.node),
        "why": why_pending.as_doc(why_pending.read(explanation.get("pending"))),
    }


def _gpu_set(node_name: str | None, placement: Doc | None) -> Doc | None:
    """The chosen GPUs with their NUMA node and PCIe switch, the links between them (weakest
    first) and the scope the set reached, so "why these GPUs" reads off the page."""
    if not node_name or not placement:
        return None
    topology = Node.objects.filter(name=node_name).values_list("topology", flat=True).first()
    gpus = [int(i) for i in placement.get("gpus", [])]
    doc: Doc = {
        "gpus": gpus,
        "milli_per_gpu": placement.get("milli_per_gpu", 0),
        "mig_slots": placement.get("mig_slots", []),
        "scope": placement.get("scope"),
        "policy": placement.get("policy"),
        "reclaimed": placement.get("reclaimed", False),
        "numa": [],
        "switches": [],
        "links": [],
    }
    if not topology or not gpus:
        return doc
    numa, switch = topology.get("gpu_numa", []), topology.get("gpu_switch", [])
    links = topology.get("links", [])
    doc["numa"] = sorted({numa[i] for i in gpus if i < len(numa)})
    doc["switches"] = sorted({switch[i] for i in gpus if i < len(switch)})
    kinds = Counter(
        links[a][b]
        for k, a in enumerate(gpus)
        for b in gpus[k + 1 :]
        if a < len(links) and b < len(links[a])
    )
    doc["links"] = [
        [kind, n] for kind, n in sorted(kinds.items(), key=lambda kv: _link_rank(kv[0]))
    ]
    return doc


def _link_rank(kind: str) -> tuple[int, str]:
    """nvidia-smi topo's link kinds, weakest first: SYS < NODE < PHB < PXB < PIX < NV#."""
    order = {"SYS": 0, "NODE": 1, "PHB": 2, "PXB": 3, "PIX": 4}
    if kind.startswith("NV"):
        return (5, kind)
    return (order.get(kind, -1), kind)
