"""Which GPU topology gpusched plans a Kubernetes node on, and, when it has none, why.

In order: the profile's node annotation (`gpu-topology.nvidia.com/info`, the seeds'
GPUTopologyInfo, see scheduling.core.topology_info; `manage.py topologyagent` writes it), then the
node's NodeResourceTopology object (NUMA zones only), else none: the node is scheduled on a
uniform guess (one NUMA node, no shared switch, no NVLink) and reported (`unknown` with a reason),
never silently. A source that lists another number of GPUs than the node allocates (a GPU gone
unhealthy, a driver upgrade in progress) is not trusted: which GPU is missing cannot be told.

Nothing here does I/O.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from kube.nrt import NrtInfo
from scheduling.core.topology import NodeTopology, TopologyError
from scheduling.core.topology_info import TopologyInfo, parse_topology_info


class Source(enum.StrEnum):
    ANNOTATION = "annotation"
    NRT = "nrt"
    UNKNOWN = "unknown"  # a GPU node without usable topology facts
    NO_GPUS = "none"  # nothing to place GPUs on, nothing to know


class Unknown(enum.StrEnum):
    """Why a GPU node's topology is unknown (label values of gpusched_nodes_topology_unknown)."""

    NO_SOURCE = "no-source"  # no annotation, no NodeResourceTopology
    INVALID = "invalid-annotation"  # an annotation that cannot be read
    GPU_COUNT = "gpu-count-mismatch"  # the sources list another number of GPUs than allocatable


@dataclass(frozen=True)
class TopologyFacts:
    topology: NodeTopology | None  # None: unknown (or no GPUs)
    source: Source
    problem: Unknown | None = None
    info: TopologyInfo | None = None  # the annotation, when it was used
    warnings: tuple[str, ...] = ()


def node_topology(
    node: str, gpu_count: int, annotation: object, nrt: NrtInfo | None
) -> TopologyFacts:
    if gpu_count == 0:
        return TopologyFacts(None, Source.NO_GPUS)
    warnings: list[str] = []
    problem: Unknown | None = None
    info: TopologyInfo | None = None
    if isinstance(annotation, str) and annotation:
        try:
            info = parse_topology_info(annotation)
        except TopologyError as exc:
            warnings.append(f"node {node}: topology annotation ignored: {exc}")
            problem = Unknown.INVALID
        else:
            warnings += _annotation_notes(node, info)
            if info.topology.gpu_count != gpu_count:
                warnings.append(
                    f"node {node}: topology annotation lists {info.topology.gpu_count} GPUs, "
                    f"the node has {gpu_count}"
                )
                info, problem = None, Unknown.GPU_COUNT
    if info is not None:
        topology = info.topology
        if nrt is not None and len(nrt.zone_cpus) >= topology.numa_count:  # allocatable CPUs
            topology = replace(topology, numa_cpus=nrt.zone_cpus)
        return TopologyFacts(topology, Source.ANNOTATION, info=info, warnings=tuple(warnings))
    if nrt is not None:
        if sum(nrt.zone_gpus) == gpu_count:
            return TopologyFacts(_from_nrt(nrt), Source.NRT, warnings=tuple(warnings))
        warnings.append(
            f"node {node}: NodeResourceTopology has {sum(nrt.zone_gpus)} GPUs in its zones, "
            f"the node has {gpu_count}"
        )
        problem = problem or Unknown.GPU_COUNT
    problem = problem or Unknown.NO_SOURCE
    warnings.append(
        f"node {node}: GPU topology unknown ({problem}): scheduled as one NUMA node without "
        "NVLink; single-numa-node cannot be enforced there"
    )
    return TopologyFacts(None, Source.UNKNOWN, problem, warnings=tuple(warnings))


def _annotation_notes(node: str, info: TopologyInfo) -> list[str]:
    notes = []
    if info.node_name and info.node_name != node:
        notes.append(f"node {node}: topology annotation names node {info.node_name!r}")
    if info.ignored_keys:
        notes.append(
            f"node {node}: topology annotation keys ignored: {', '.join(info.ignored_keys)}"
        )
    return notes


def _from_nrt(nrt: NrtInfo) -> NodeTopology:
    """NUMA zones say which NUMA node holds how many GPUs, nothing about switches or NVLink."""
    numa = nrt.gpu_numa
    n = len(numa)
    links = tuple(
        tuple("X" if i == j else ("NODE" if numa[i] == numa[j] else "SYS") for j in range(n))
        for i in range(n)
    )
    return NodeTopology(
        gpu_numa=numa, gpu_switch=tuple(range(n)), links=links, numa_cpus=nrt.zone_cpus
    )
