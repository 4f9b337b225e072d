"""The scheduler's view of the cluster, read from the database: every node with its GPUs and
topology, every active allocation assumed onto them (the snapshot), and the pods it places."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Q

from scheduling import pod_resources
from scheduling.core.gpu_sets import MAX_GPUS_PER_NODE
from scheduling.core.snapshot import ClusterSnapshot, OverCommitError
from scheduling.core.topology import NodeTopology
from scheduling.core.types import (
    GangRef,
    GpuDevice,
    NodeSpec,
    Placement,
    PodRequest,
    ServiceClass,
    SharingMode,
    Taint,
    TaintEffect,
    Toleration,
    TopologyPolicy,
    TopologyScope,
)
from scheduling.models import (
    Allocation,
    Gpu,
    GpuAssignment,
    Node,
    NodeNuma,
    Pod,
)


@dataclass
class ClusterState:
    """The snapshot plus the ids the binding transaction needs to write back."""

    snapshot: ClusterSnapshot
    node_ids: dict[str, int]
    gpu_ids: dict[tuple[str, int], int]
    held: dict[str, tuple[PodRequest, Placement]]  # pod uid -> what the snapshot holds for it
    numa_ids: dict[tuple[str, int], int] = field(default_factory=dict)  # (node, NUMA) -> NodeNuma
    # Nodes whose recorded state contradicts their capacity, and why: nothing is placed there,
    # the rest of the cluster schedules on (liveness is an invariant, DESIGN.md §8).
    quarantined: dict[str, str] = field(default_factory=dict)


def cluster_state() -> ClusterState:
    """Every node with its GPUs, and every active allocation assumed onto them. Whatever is
    committed, this never fails: a node that cannot be represented, or holds more than it has, is
    quarantined with the reason."""
    # Nodes first: a node registers with its GPUs in one transaction, so every node read here has
    # all its GPUs in the next read (read the other way round, a node registered in between would
    # come without GPUs).
    nodes = list(Node.objects.order_by("name"))
    gpus_by_node: dict[int, list[Gpu]] = defaultdict(list)
    for gpu in Gpu.objects.filter(present=True).order_by("node_id", "index"):
        gpus_by_node[gpu.node_id].append(gpu)
    topologies: dict[str, NodeTopology] = {}
    quarantined: dict[str, str] = {}
    specs = []
    for node in nodes:
        spec, problem = sound_node_spec(node, gpus_by_node[node.id], topologies)
        specs.append(spec)
        if problem:
            quarantined[node.name] = problem
    snapshot = ClusterSnapshot(specs)
    node_ids = {node.name: node.id for node in nodes}
    gpu_ids = _gpu_ids(nodes)  # absent GPUs too: allocations still name them
    numa_ids = {
        (name, index): pk
        for name, index, pk in NodeNuma.objects.values_list("node__name", "index", "pk")
    }
    held = {}
    for pod, placement in active_placements():
        if placement.node in quarantined:
            continue
        try:
            snapshot.assume(pod, placement)
        except (OverCommitError, ValueError, IndexError, KeyError) as exc:
            quarantined[placement.node] = f"holds more than it has: pod {pod.name}: {exc}"[:512]
            continue
        held[pod.uid] = (pod, placement)
    for name in quarantined:
        if name in snapshot.index:
            snapshot.quarantine(name)
    return ClusterState(snapshot, node_ids, gpu_ids, held, numa_ids, quarantined)


def _gpu_ids(nodes: Iterable[Node]) -> dict[tuple[str, int], int]:
    names = {node.id: node.name for node in nodes}
    return {
        (names[node_id], index): pk
        for node_id, index, pk in Gpu.objects.values_list("node_id", "index", "pk")
        if node_id in names
    }


def sound_node_spec(
    node: Node, gpus: list[Gpu], topologies: dict[str, NodeTopology] | None = None
) -> tuple[NodeSpec, str]:
    """The node as the core sees it, and what makes it unsound ("" when nothing): a node the
    snapshot could not represent as recorded is given a shape it can, and quarantined."""
    problem = ""
    indices = [gpu.index for gpu in gpus]
    if len(gpus) > MAX_GPUS_PER_NODE:
        problem = f"reports {len(gpus)} GPUs, at most {MAX_GPUS_PER_NODE} per node are supported"
        gpus = gpus[:MAX_GPUS_PER_NODE]
    elif indices != list(range(len(gpus))):
        problem = f"its GPUs' indices {indices} are not 0..{len(gpus) - 1}"
        gpus = []
    topology: NodeTopology | None
    try:
        topology = _topology(node.topology, topologies if topologies is not None else {})
    except (KeyError, TypeError, ValueError) as exc:
        problem = problem or f"its recorded topology cannot be read: {exc}"
        topology = None
    if topology is not None and topology.gpu_count != len(gpus):
        problem = problem or (
            f"its topology lists {topology.gpu_count} GPUs, it reports {len(gpus)}"
        )
        topology = None
    return node_spec(node, gpus, topology), problem[:512]


def node_spec(node: Node, gpus: Sequence[Gpu], topology: NodeTopology | None) -> NodeSpec:
    """`topology` None: not known (the snapshot plans on its uniform shape and knows it)."""
    return NodeSpec(
        name=node.name,
        cpu_milli=node.cpu_milli,
        memory_mib=node.memory_mib,
        gpus=tuple(
            GpuDevice(
                index=gpu.index,
                model=gpu.model,
                memory_mib=gpu.memory_mib,
                uuid=gpu.uuid,
                sharing=SharingMode(gpu.sharing),
                mig_layout=tuple(gpu.mig_layout),
            )
            for gpu in gpus
        ),
        topology=topology,
        labels=dict(node.labels),
        taints=tuple(
            Taint(t["key"], t.get("value", ""), TaintEffect(t.get("effect", "NoSchedule")))
            for t in node.taints
        ),
        cordoned=node.cordoned,
    )


def _topology(doc: dict[str, Any], seen: dict[str, NodeTopology]) -> NodeTopology | None:
    """Identical topologies become one object, so the snapshot builds one GPU-set table per kind.
    None: no topology was recorded."""
    if not doc:
        return None
    key = json.dumps(doc, sort_keys=True)
    if key not in seen:
        seen[key] = topology_from_json(doc)
    return seen[key]


def topology_from_json(doc: dict[str, Any]) -> NodeTopology:
    return NodeTopology(
        gpu_numa=tuple(int(v) for v in doc["gpu_numa"]),
        gpu_switch=tuple(int(v) for v in doc["gpu_switch"]),
        links=tuple(tuple(str(cell) for cell in row) for row in doc["links"]),
        numa_cpus=tuple(int(v) for v in doc.get("numa_cpus", [])),
    )


def topology_to_json(topology: NodeTopology) -> dict[str, Any]:
    return {
        "gpu_numa": list(topology.gpu_numa),
        "gpu_switch": list(topology.gpu_switch),
        "links": [list(row) for row in topology.links],
        "numa_cpus": list(topology.numa_cpus),
    }


def active_placements(pod_uids: list[str] | None = None) -> Iterable[tuple[PodRequest, Placement]]:
    """Reserved and bound allocations (of the given pods, or all) as (request, placement) pairs."""
    # In bind order, so the snapshot's pod index knows which pods started most recently.
    allocations = (
        Allocation.objects.filter(active=True)
        .select_related("pod__workload__tenant", "node")
        .order_by("id")
    )
    assignment_rows = GpuAssignment.objects.filter(active=True).select_related("gpu")
    if pod_uids is not None:
        allocations = allocations.filter(pod__uid__in=pod_uids)
        assignment_rows = assignment_rows.filter(allocation__in=allocations)
    assignments: dict[int, list[GpuAssignment]] = defaultdict(list)
    for assignment in assignment_rows:
        assignments[assignment.allocation_id].append(assignment)
    for allocation in allocations:
        gpus = assignments[allocation.id]
        whole_or_shared = [a for a in gpus if a.mig_slot is None]
        yield (
            pod_request(allocation.pod),
            Placement(
                node=allocation.node.name,
                gpu_indices=tuple(sorted(a.gpu.index for a in whole_or_shared)),
                milli_per_gpu=whole_or_shared[0].milli if whole_or_shared else 0,
                mig_slots=tuple(
                    sorted((a.gpu.index, a.mig_slot) for a in gpus if a.mig_slot is not None)
                ),
                numa_cpu_milli=tuple(allocation.numa_cpu_milli),
                scope=TopologyScope(allocation.scope) if allocation.scope else None,
                reclaimed=any(a.reclaimed for a in whole_or_shared),
            ),
        )


def pod_request(pod: Pod) -> PodRequest:
    """The pod as the core sees it. An admitted workload's flavors add their node labels to the
    pod's node selector and their tolerations to its tolerations."""
    workload = pod.workload
    selector = dict(pod.node_selector)
    if workload.node_selector:
        selector.update(workload.node_selector)
    tolerations = list(pod.tolerations) + list(workload.tolerations or [])
    return PodRequest.of(
        pod_resources.resources_of(pod),
        uid=str(pod.uid),
        name=pod.name,
        namespace=pod.workload.tenant.namespace,
        tenant=pod.workload.tenant.name,
        priority=pod.priority,
        service_class=ServiceClass(pod.service_class),
        gpu_models=frozenset(pod.gpu_models),
        topology_policy=TopologyPolicy(pod.topology_policy) if pod.topology_policy else None,
        topology_scope=TopologyScope(pod.topology_scope) if pod.topology_scope else None,
        node_selector=selector,
        tolerations=tolerations_from_json(tolerations),
        gang=GangRef(f"{pod.workload_id}/{pod.pod_set}", pod.gang_min_count)
        if pod.gang_min_count
        else None,
        workload=f"{workload.tenant.name}/{workload.name}",
        created_at=pod.created_at.timestamp() if pod.created_at else 0.0,
        can_preempt=workload.preemption_policy != "Never",
        nominated_node=pod.nominated_node,
    )


def tolerations_from_json(docs: Iterable[Mapping[str, Any]]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            key=t.get("key", ""),
            operator=t.get("operator", "Equal"),
            value=t.get("value", ""),
            effect=TaintEffect(t["effect"]) if t.get("effect") else None,
        )
        for t in docs
    )


def pending_pods(now: datetime, limit: int) -> list[Pod]:
    """Pods waiting for a node whose backoff has passed, highest priority first, then oldest."""
    return list(
        Pod.objects.filter(phase=Pod.Phase.PENDING, workload__state__in=("Admitted", "Running"))
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .select_related("workload__tenant")
        .order_by("-priority", "created_at", "id")[:limit]
    )


def with_gang_members(pods: list[Pod]) -> list[Pod]:
    """`pods` plus the other pending members of every gang among them (whatever their backoff),
    so a gang is always tried whole."""
    gangs = {(p.workload_id, p.pod_set) for p in pods if p.gang_min_count}
    if not gangs:
        return pods
    have = {p.pk for p in pods}
    extra = [
        p
        for p in Pod.objects.filter(
            phase=Pod.Phase.PENDING, workload_id__in={w for w, _ in gangs}, gang_min_count__gt=0
        )
        .select_related("workload__tenant")
        .order_by("id")
        if (p.workload_id, p.pod_set) in gangs and p.pk not in have
    ]
    return pods + extra


def terminating_pods() -> frozenset[str]:
    """Pods evicted and still terminating: they hold what they hold, and are nobody's victims."""
    return frozenset(
        str(uid)
        for uid in Pod.objects.filter(phase=Pod.Phase.TERMINATING).values_list("uid", flat=True)
    )
