"""Small helpers shared by the core tests: build a framework from YAML and place pods one by one."""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.core.profiles import load_profiles
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import NodeSpec, PodRequest

TOPOLOGY_PROFILE = """
profiles:
- schedulerName: gpusched
  plugins:
    multiPoint:
      enabled:
      - {name: GPUTopology, weight: 5}
"""


def framework(yaml_text: str = TOPOLOGY_PROFILE) -> Framework:
    return Framework(load_profiles(yaml_text)[0])


def place_all(
    nodes: Iterable[NodeSpec], pods: Iterable[PodRequest], fw: Framework | None = None
) -> tuple[ClusterSnapshot, list[Decision]]:
    snapshot = ClusterSnapshot(nodes)
    fw = fw or framework()
    return snapshot, [fw.schedule_one(pod, snapshot) for pod in pods]


def filter_reason(node: NodeSpec, pod: PodRequest, fw: Framework | None = None) -> str:
    """The first failing filter reason of a one-node cluster, or "" when the pod fits."""
    _, (decision,) = place_all([node], [pod], fw)
    if decision.placement is not None:
        return ""
    failing = [
        f["reason"] for f in decision.explain(node.name)["filters"] if f["code"] != "Success"
    ]
    return failing[0] if failing else decision.status.message()
