"""Where in the topology across nodes a pod set may go, for the batch: its topology request
(`PodRequest.domain_ask`) judged by its flavor's Topology (`PodRequest.domain_topology`) against
the snapshot's free capacity (scheduling.core.domains.place, the profile's TopologyDomains
algorithm: gpusched's LeastFragmenting by default, or Kueue TAS's BestFit), as the node masks the
batch tries the set in.

The masks go tightest first: the nodes the placement chose, then every node of the domains it
chose at the level it fitted at. The first keeps Kueue's choice of as few racks and nodes as
hold the set; the second lets the scheduler's own node and GPU choice (NUMA, NVLink, load) place
the pods where the count per node alone was too coarse, still inside the domain. A pod set
without a request gets no mask; one whose request cannot be placed gets the reason.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduling.core.domains import (
    HOSTNAME_LABEL,
    PLUGIN,
    DomainError,
    DomainPlacement,
    NodeRoom,
    PodShape,
    Topology,
    domain_fit,
    place,
)
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import BoolArray, ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import MILLI_PER_GPU, NodeSpec, PodRequest


def domain_masks(
    framework: Framework, snapshot: ClusterSnapshot, members: Sequence[PodRequest]
) -> list[BoolArray] | Status | None:
    """The nodes to keep the pod set `members` *out of*, one mask per try (tightest first);
    None: it asks for no topology; a Status: why it cannot be placed now (or ever)."""
    pod = members[0]
    ask = pod.domain_ask
    if ask is None:
        return None
    if pod.domain_topology is None:
        return Status.of(
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"asks for topology ({ask.mode.value} {ask.level or ask.slice_level}) but its "
            "flavor names no Topology (ResourceFlavor spec.topologyName)",
            plugin=PLUGIN,
        )
    try:
        request = ask.on(pod.domain_topology)
    except DomainError as exc:
        return Status.of(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, str(exc), plugin=PLUGIN)
    count = sum(1 for m in members if m.uid not in snapshot.pods)
    fit = domain_fit(framework.profile.plugin_args.get(PLUGIN))
    placed = place(request, node_rooms(framework, snapshot, pod), pod_shape(pod), count, fit)
    if isinstance(placed, Status):
        return placed
    chosen = np.array([name in placed.pods_per_node for name in snapshot.names], dtype=np.bool_)
    return [~chosen, ~_in_domains(snapshot, pod.domain_topology, placed)]


def node_rooms(framework: Framework, snapshot: ClusterSnapshot, pod: PodRequest) -> list[NodeRoom]:
    """Each node's free room as the placement counts it; eligible where the profile's filters
    let `pod` go now."""
    _, feasible = framework.filter_nodes(pod, snapshot)
    eligible = np.zeros(len(snapshot), dtype=np.bool_)
    eligible[feasible] = True
    whole_free = (snapshot.gpu_free == MILLI_PER_GPU).sum(axis=1)
    return [
        NodeRoom(
            node.name,
            node_labels(node),
            int(whole_free[i]),
            int(snapshot.cpu_free[i]),
            int(snapshot.memory_free[i]),
            bool(eligible[i]),
        )
        for i, node in enumerate(snapshot.nodes)
    ]


def pod_shape(pod: PodRequest) -> PodShape:
    return PodShape(pod.gpus, pod.cpu_milli, pod.memory_mib)


def node_labels(node: NodeSpec) -> dict[str, str]:
    """A node's labels as the topology reads them: the kubelet sets kubernetes.io/hostname on
    every Kubernetes node; a node of the database side gets its name there too."""
    return {HOSTNAME_LABEL: node.name, **node.labels}


def _in_domains(
    snapshot: ClusterSnapshot, topology: Topology, placed: DomainPlacement
) -> BoolArray:
    depth = topology.index(placed.level) + 1
    wanted = set(placed.domains)
    return np.array(
        [
            tuple(node_labels(node).get(label, "") for label in topology.levels[:depth]) in wanted
            for node in snapshot.nodes
        ],
        dtype=np.bool_,
    )
