"""Say so when a GPU node has no usable topology, instead of silently scheduling on a guess.

Per node whose topology becomes unknown (or unknown for another reason): one Warning event on the
Node (`GPUTopologyUnknown`, with the reason and what was wrong); once facts arrive again, one
Normal event (`GPUTopologyKnown`). The scheduler's gauge `gpusched_nodes_topology_unknown{reason}`
counts such nodes now. Called by the node sync of the scheduling cycle with every translated node.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from prometheus_client import Gauge

from kube.api import KubeApi
from kube.node_topology import Unknown
from kube.translate import NodeFacts
from scheduling.worker.metrics import registry

UNKNOWN_REASON = "GPUTopologyUnknown"
KNOWN_REASON = "GPUTopologyKnown"
ACTION = "ReadTopology"

nodes_topology_unknown = Gauge(
    "gpusched_nodes_topology_unknown",
    "GPU nodes scheduled without topology facts (a uniform guess: single-numa-node cannot be "
    "enforced there), by reason: no-source (no annotation, no NodeResourceTopology), "
    "invalid-annotation, gpu-count-mismatch (the facts list another number of GPUs).",
    ["reason"],
    registry=registry,
)
for _reason in Unknown:
    nodes_topology_unknown.labels(reason=_reason.value)


class TopologyWarnings:
    def __init__(self, api: KubeApi) -> None:
        self.api = api
        self._unknown: dict[str, Unknown] = {}

    def observe(self, node: Mapping[str, Any], facts: NodeFacts, now: datetime) -> None:
        name = facts.spec.name
        uid = str((node.get("metadata") or {}).get("uid") or "")
        before = self._unknown.get(name)
        problem = facts.topology_unknown
        if problem is not None and problem != before:
            note = "; ".join(facts.warnings) or f"GPU topology unknown ({problem})"
            self._event(name, uid, "Warning", UNKNOWN_REASON, note, now)
        elif problem is None and before is not None:
            note = f"GPU topology from the {facts.topology_source}"
            self._event(name, uid, "Normal", KNOWN_REASON, note, now)
        if problem == before:
            return
        if problem is None:
            del self._unknown[name]
        else:
            self._unknown[name] = problem
        self._publish()

    def _event(self, node: str, uid: str, kind: str, reason: str, note: str, now: datetime) -> None:
        self.api.node_event(
            node=node, uid=uid, kind=kind, reason=reason, action=ACTION, note=note, now=now
        )

    def forget(self, name: str) -> None:
        if self._unknown.pop(name, None) is not None:
            self._publish()

    def _publish(self) -> None:
        counts = Counter(self._unknown.values())
        for reason in Unknown:
            nodes_topology_unknown.labels(reason=reason.value).set(counts[reason])
