"""One scheduling decision, offline: Kubernetes YAML of nodes and a pod through a profile, and why
each node passes or fails (`manage.py explain`).

The nodes file holds Nodes as the API gives them (`kubectl get nodes -o yaml`: a `List`, or one
document per object) and, optionally, Pods already bound to them (`spec.nodeName`), which are
counted where they run, on the GPUs their `gpusched.io/gpu-ids` annotation names. Nodes and pods
are translated as the scheduler translates them (kube.translate), with the topology annotation
the profile reads. Nothing here touches the database or a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kube.adopt import placement_on
from kube.side import topology_annotation
from kube.translate import TranslationError, node_spec, pod_info
from scheduling.core import yaml_documents
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot, OverCommitError
from scheduling.core.status import Code
from scheduling.core.types import NodeSpec

Obj = dict[str, Any]

FEASIBLE = "feasible"
VERDICTS = {
    Code.UNSCHEDULABLE: "unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "unschedulableAndUnresolvable",
}


class ExplainError(ValueError):
    """Input that cannot be explained; the message names the file, the object and the key."""


@dataclass(frozen=True)
class Document:
    source: str  # "nodes.yaml: document 2 (Node gpu-a)"
    obj: Obj

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind") or "")


def read_documents(path: Path) -> list[Document]:
    """Every object of a YAML file: multi-document, and `List` / `NodeList` / `PodList` items."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ExplainError(f"{path}: {exc.strerror or exc}") from exc
    try:
        raw = [doc for doc in yaml_documents.load_all(text) if doc is not None]
    except yaml_documents.YamlError as exc:
        raise ExplainError(f"{path}: {exc}") from exc
    documents = []
    for number, doc in enumerate(raw, start=1):
        where = f"{path}: document {number}"
        if not isinstance(doc, dict):
            raise ExplainError(f"{where}: not an object")
        kind = str(doc.get("kind") or "")
        if kind.endswith("List"):
            items = doc.get("items")
            if not isinstance(items, list):
                raise ExplainError(f"{where} ({kind}): items must be a list")
            for k, item in enumerate(items):
                if not isinstance(item, dict):
                    raise ExplainError(f"{where} ({kind}): items[{k}] is not an object")
                documents.append(Document(f"{where} items[{k}]{_named(item)}", item))
        else:
            documents.append(Document(f"{where}{_named(doc)}", doc))
    return documents


def _named(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f" ({obj.get('kind') or '?'} {name})" if name else f" ({obj.get('kind') or '?'})"


def explain(
    node_docs: Sequence[Document], pod_docs: Sequence[Document], framework: Framework
) -> tuple[Obj, list[str]]:
    """The decision as one JSON-able object, and the warnings translation raised."""
    warnings: list[str] = []
    annotation = topology_annotation(framework)
    nodes: list[NodeSpec] = []
    bound: list[Document] = []
    for doc in node_docs:
        if doc.kind == "Node":
            try:
                facts = node_spec(doc.obj, annotation=annotation)
            except TranslationError as exc:
                raise ExplainError(f"{doc.source}: {exc}") from exc
            nodes.append(facts.spec)
            warnings += facts.warnings
        elif doc.kind == "Pod" and (doc.obj.get("spec") or {}).get("nodeName"):
            bound.append(doc)
        else:
            raise ExplainError(f"{doc.source}: kind must be Node (or a Pod bound to a node)")
    if not nodes:
        raise ExplainError("the nodes file holds no Node")
    pods = [doc for doc in pod_docs if doc.kind == "Pod"]
    if len(pods) != 1 or len(pod_docs) != 1:
        raise ExplainError(f"the pod file must hold exactly one Pod, it holds {len(pod_docs)}")
    try:
        snapshot = ClusterSnapshot(nodes)
    except ValueError as exc:
        raise ExplainError(f"nodes: {exc}") from exc
    for doc in bound:
        warnings += _assume(snapshot, doc)
    (pod,) = pods
    info = pod_info(pod.obj)
    try:
        request = info.request()
    except TranslationError as exc:
        raise ExplainError(f"{pod.source}: {exc}") from exc
    decision = framework.schedule_one(request, snapshot)
    return _decision_doc(info.key, decision), warnings


def _assume(snapshot: ClusterSnapshot, doc: Document) -> list[str]:
    info = pod_info(doc.obj)
    if info.terminal:
        return []
    try:
        request = info.request()
    except TranslationError as exc:
        raise ExplainError(f"{doc.source}: {exc}") from exc
    placement = placement_on(snapshot, info.node_name, request, info.annotations)
    if placement is None:
        return [f"{doc.source}: does not fit on {info.node_name!r} any more; not counted"]
    try:
        snapshot.assume(request, placement)
    except OverCommitError as exc:
        return [f"{doc.source}: {exc}; not counted"]
    return []


def _decision_doc(pod: str, decision: Decision) -> Obj:
    placement = decision.placement
    gpus = sorted(
        {*placement.gpu_indices, *(g for g, _ in placement.mig_slots)} if placement else ()
    )
    nodes: dict[str, Obj] = {}
    for i, name in enumerate(decision.node_names):
        reasons = []
        verdict = FEASIBLE
        if not decision.filters and not decision.status.is_success:
            # A PreFilter rejection: the pod fails everywhere for the same reason.
            verdict = VERDICTS.get(decision.status.code, VERDICTS[Code.UNSCHEDULABLE])
            reasons.append(f"{decision.status.plugin}: {decision.status.message()}")
        for plugin, verdicts in decision.filters:
            status = verdicts.status(i, plugin)
            if status.is_success:
                continue
            reasons.append(f"{plugin}: {status.message()}")
            if verdict != VERDICTS[Code.UNSCHEDULABLE_AND_UNRESOLVABLE]:
                verdict = VERDICTS[status.code]
        explained = decision.explain(name)
        nodes[name] = {
            "verdict": verdict,
            "reasons": reasons,
            "score": explained["total"],
            "scores": explained["scores"],
        }
    return {
        "pod": pod,
        "feasible": decision.feasible_nodes,
        "chosen": {"node": placement.node if placement else None, "gpuIds": gpus},
        "nodes": nodes,
    }


def render_text(doc: Obj) -> str:
    """The decision for a terminal: the choice first, then every node."""
    chosen = doc["chosen"]
    head = f"pod {doc['pod']}: {doc['feasible']}/{len(doc['nodes'])} nodes feasible"
    if chosen["node"]:
        ids = ",".join(str(g) for g in chosen["gpuIds"]) or "none"
        head += f"; chosen {chosen['node']}, GPUs {ids}"
    else:
        head += "; not placed"
    width = max((len(name) for name in doc["nodes"]), default=0)
    lines = [head]
    for name, node in doc["nodes"].items():
        if node["verdict"] == FEASIBLE:
            scores = ", ".join(f"{p} {s:g}" for p, s in node["scores"].items())
            detail = f"score {node['score']:g} ({scores})" if node["score"] is not None else ""
            lines.append(f"  {name:<{width}}  {FEASIBLE:<28}  {detail}".rstrip())
            continue
        first, *rest = node["reasons"] or [""]
        lines.append(f"  {name:<{width}}  {node['verdict']:<28}  {first}".rstrip())
        lines += [f"  {'':<{width}}  {'':<28}  {reason}" for reason in rest]
    return "\n".join(lines)
