"""The scheduler's view of the cluster, read from the database: every node with its GPUs and
topology, every active allocation assumed onto them (the snapshot), and the pods it places."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from functools import reduce
from typing import Any, Protocol

from django.db.models import Count, Prefetch, Q, QuerySet

from scheduling import pod_resources
from scheduling.core.domains import DomainAsk, DomainError, Topology
from scheduling.core.gpu_sets import MAX_GPUS_PER_NODE
from scheduling.core.queueing.batch import NominatedPod
from scheduling.core.snapshot import ClusterSnapshot, OverCommitError
from scheduling.core.topology import NodeTopology
from scheduling.core.types import (
    GangRef,
    GpuDevice,
    NodeSpec,
    Placement,
    PodRequest,
    Resources,
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
    Workload,
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
    gpus_by_node: dict[int, list[GpuRow]] = defaultdict(list)
    # Plain rows of the columns used, not models: a large cluster has tens of thousands of GPUs.
    for node_id, *gpu in (
        Gpu.objects.filter(present=True)
        .order_by("node_id", "index")
        .values_list("node_id", *_GPU_COLUMNS)
    ):
        gpus_by_node[node_id].append(GpuRow(*gpu))
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


@dataclass(frozen=True, slots=True)
class GpuRow:
    """What the snapshot reads of a Gpu row (a Gpu has the same attributes)."""

    index: int
    model: str
    memory_mib: int
    uuid: str
    sharing: str
    mig_layout: list[Any]


_GPU_COLUMNS = [f.name for f in fields(GpuRow)]


class GpuFacts(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def memory_mib(self) -> int: ...
    @property
    def uuid(self) -> str: ...
    @property
    def sharing(self) -> str: ...
    @property
    def mig_layout(self) -> Any: ...


def _gpu_ids(nodes: Iterable[Node]) -> dict[tuple[str, int], int]:
    names = {node.id: node.name for node in nodes}
    return {
        (names[node_id], index): pk
        for node_id, index, pk in Gpu.objects.values_list("node_id", "index", "pk")
        if node_id in names
    }


def sound_node_spec(
    node: Node, gpus: Sequence[GpuFacts], topologies: dict[str, NodeTopology] | None = None
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


def node_spec(node: Node, gpus: Sequence[GpuFacts], topology: NodeTopology | None) -> NodeSpec:
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
        numa_cpus=tuple(None if v is None else int(v) for v in doc.get("numa_cpus", [])),
    )


def topology_to_json(topology: NodeTopology) -> dict[str, Any]:
    return {
        "gpu_numa": list(topology.gpu_numa),
        "gpu_switch": list(topology.gpu_switch),
        "links": [list(row) for row in topology.links],
        "numa_cpus": list(topology.numa_cpus),
    }


def active_placements(pod_uids: list[str] | None = None) -> Iterable[tuple[PodRequest, Placement]]:
    """Reserved and bound allocations (of the given pods, or all) as (request, placement) pairs.
    Read as plain rows of the columns used: a rebuild reads every allocation of the cluster."""
    # In bind order, so the snapshot's pod index knows which pods started most recently.
    allocations = Allocation.objects.filter(active=True).order_by("id")
    assignment_rows = GpuAssignment.objects.filter(active=True)
    if pod_uids is not None:
        allocations = allocations.filter(pod__uid__in=pod_uids)
        assignment_rows = assignment_rows.filter(allocation__in=allocations)
    # Per allocation: (GPU index, MIG slot or None, milli, reclaimed) of each GPU it holds.
    assignments: dict[int, list[tuple[int, int | None, int, bool]]] = defaultdict(list)
    for allocation_id, index, slot, milli, reclaimed in assignment_rows.values_list(
        "allocation_id", "gpu__index", "mig_slot", "milli", "reclaimed"
    ):
        assignments[allocation_id].append((index, slot, milli, reclaimed))
    pod_columns = [f"pod__{column}" for column in _POD_ROW]
    for allocation_id, node, numa_cpu_milli, scope, *pod in allocations.values_list(
        "id", "node__name", "numa_cpu_milli", "scope", *pod_columns
    ):
        gpus = assignments[allocation_id]
        whole_or_shared = [g for g in gpus if g[1] is None]
        yield (
            _pod_request_of_row(pod),
            Placement(
                node=node,
                gpu_indices=tuple(sorted(g[0] for g in whole_or_shared)),
                milli_per_gpu=whole_or_shared[0][2] if whole_or_shared else 0,
                mig_slots=tuple(sorted((g[0], g[1]) for g in gpus if g[1] is not None)),
                numa_cpu_milli=tuple(numa_cpu_milli),
                scope=TopologyScope(scope) if scope else None,
                reclaimed=any(g[3] for g in whole_or_shared),
            ),
        )


def pod_request(pod: Pod) -> PodRequest:
    """The pod as the core sees it. An admitted workload's flavors add their node labels to the
    pod's node selector and their tolerations to its tolerations."""
    return _pod_request_of_row([reduce(getattr, path.split("__"), pod) for path in _POD_ROW])


# What the filters read of a pod besides its resources (its identity aside), as Pod columns in
# _request's order; the last two are its workload's flavors'.
_CONSTRAINTS = (
    "service_class",
    "constraints__gpu_models",
    "topology_policy",
    "topology_scope",
    "constraints__node_selector",
    "constraints__tolerations",
    "workload__node_selector",
    "workload__tolerations",
)
# Who the pod is, in _pod_request_of_row's order.
_IDENTITY = (
    "uid",
    "name",
    "workload__tenant__namespace",
    "workload__tenant__name",
    "workload__name",
    "workload_id",
    "pod_set",
    "gang_min_count",
    "priority",
    "created_at",
    "workload__preemption_policy",
    "nominated_node",
    "topology_request",
    "workload__topology",
)
# Everything pod_request reads of a Pod row (a values_list of these, or the same paths walked on
# a Pod object).
_POD_ROW = (*pod_resources.COLUMNS, *_CONSTRAINTS, *_IDENTITY)


def _pod_request_of_row(values: Sequence[Any]) -> PodRequest:
    width, constraints = len(pod_resources.COLUMNS), len(_CONSTRAINTS)
    (
        uid,
        name,
        namespace,
        tenant,
        workload,
        workload_id,
        pod_set,
        gang_min_count,
        priority,
        created_at,
        preemption_policy,
        nominated_node,
        topology_request,
        topology,
    ) = values[width + constraints :]
    return _request(
        pod_resources.from_values(values[:width]),
        *values[width : width + constraints],
        uid=str(uid),
        name=name,
        namespace=namespace,
        tenant=tenant,
        priority=priority,
        gang=GangRef(
            f"{workload_id}/{pod_set}",  # the key: unique, orders decisions
            gang_min_count,
            label=f"{namespace}/{workload} ({pod_set})",
        )
        if gang_min_count
        else None,
        workload=f"{tenant}/{workload}",
        created_at=created_at.timestamp() if created_at else 0.0,
        can_preempt=preemption_policy != "Never",
        nominated_node=nominated_node,
        domain_ask=DomainAsk.from_json(topology_request or {}),
        domain_topology=_workload_topology(topology),
    )


def _workload_topology(doc: Mapping[str, Any] | None) -> Topology | None:
    """A workload's stored Topology ({"name", "levels"}; {}: its flavor has none). Levels that
    no longer make a Topology (stored by hand) are no Topology: its pods wait, told why."""
    if not doc:
        return None
    try:
        return Topology(str(doc.get("name", "")), tuple(str(v) for v in doc.get("levels", ())))
    except DomainError:
        return None


def _request(
    resources: Resources,
    service_class: str,
    gpu_models: Iterable[str],
    topology_policy: str,
    topology_scope: str,
    node_selector: Mapping[str, str],
    tolerations: Iterable[Mapping[str, Any]],
    flavor_selector: Mapping[str, str] | None,
    flavor_tolerations: Iterable[Mapping[str, Any]] | None,
    **identity: Any,
) -> PodRequest:
    return PodRequest.of(
        resources,
        service_class=ServiceClass(service_class),
        gpu_models=frozenset(gpu_models),
        topology_policy=TopologyPolicy(topology_policy) if topology_policy else None,
        topology_scope=TopologyScope(topology_scope) if topology_scope else None,
        node_selector={**node_selector, **(flavor_selector or {})},
        tolerations=tolerations_from_json([*tolerations, *(flavor_tolerations or [])]),
        **identity,
    )


def waiting_shapes() -> list[PodRequest]:
    """One pod of each distinct shape (resources and what the filters read) among the pods that
    wait, for quota or for a node, and ask for whole or shared GPUs; the most common shape first."""
    width = len(pod_resources.COLUMNS)
    rows = (
        Pod.objects.filter(phase=Pod.Phase.PENDING, workload__state__in=Workload.ACTIVE_STATES)
        .filter(Q(gpus__gt=0) | Q(gpu_milli__gt=0))
        .values_list(*pod_resources.COLUMNS, *_CONSTRAINTS)
        .annotate(pods=Count("id"))
        .order_by("-pods")
    )
    return [
        _request(
            pod_resources.from_values(row[:width]),
            *row[width:-1],
            uid=f"shape-{k}",
            name=f"shape-{k}",
        )
        for k, row in enumerate(rows)
    ]


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


def batch_pods() -> QuerySet[Pod]:
    """Pods as a cycle reads them, with their workload and tenant; without the columns it never
    reads of them, which parsing would cost most of the read: the workload's pod sets (every
    template of the workload) and quota usage. Each workload, with its
    tenant, is read once for all its pods in the batch (a second query), not joined to every
    pod row: a batch holds whole workloads of up to hundreds of pods, and building a workload
    (its JSON columns, its dates) per pod was most of what was left of the read. Their
    constraints likewise: one object per distinct row, shared by the pods of a pod set."""
    return Pod.objects.prefetch_related(
        Prefetch(
            "workload",
            queryset=Workload.objects.select_related("tenant").defer("pod_sets", "quota_usage"),
        ),
        "constraints",
    )


def pending_pods(now: datetime, limit: int) -> list[Pod]:
    """Pods waiting for a node whose backoff has passed, highest priority first, then oldest.

    Chosen first by id alone, then read whole: ordering every pending pod joined to its workload
    made the database carry and sort wide rows of all of them, and on a table whose statistics
    lag its growth (pods submitted by the thousand) the planner joined them by nested loop, a
    quarter of a second a cycle at 20,000 pending pods. The admitted workloads' ids are a list
    (no join at all) unless there are too many of them for one statement's parameters."""
    admitted_states = (Workload.State.ADMITTED, Workload.State.RUNNING)
    admitted = Workload.objects.filter(state__in=admitted_states)
    workload_ids: Any = list(admitted.values_list("id", flat=True)[: _MAX_LISTED + 1])
    if len(workload_ids) > _MAX_LISTED:
        workload_ids = admitted.values("id")
    order = ("-priority", "created_at", "id")
    chosen = list(
        Pod.objects.filter(phase=Pod.Phase.PENDING, workload_id__in=workload_ids)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
        .order_by(*order)
        .values_list("id", flat=True)[:limit]
    )
    # Read again under the same conditions: a pod bound or cancelled, or a workload evicted,
    # between the two reads is not pending any more. The workload's state is checked on the
    # workloads read for the batch anyway: joined in the query, it let a planner without
    # statistics (a burst of submissions) drive the read from the workloads, a tenth of a
    # second a cycle, where the ids alone make it a primary-key lookup whatever it knows.
    pods = batch_pods().filter(id__in=chosen, phase=Pod.Phase.PENDING).order_by(*order)
    return [pod for pod in pods if pod.workload.state in admitted_states]


_MAX_LISTED = 10_000  # admitted workloads named in the pending-pod query; beyond, a subquery


def with_gang_members(pods: list[Pod]) -> list[Pod]:
    """`pods` plus the other pending members of every gang among them (whatever their backoff),
    so a gang is always tried whole."""
    gangs = {(p.workload_id, p.pod_set) for p in pods if p.gang_min_count}
    if not gangs:
        return pods
    have = {p.pk for p in pods}
    extra = [
        p
        for p in batch_pods()
        .filter(
            phase=Pod.Phase.PENDING, workload_id__in={w for w, _ in gangs}, gang_min_count__gt=0
        )
        .order_by("id")
        if (p.workload_id, p.pod_set) in gangs and p.pk not in have
    ]
    return pods + extra


def nominated_pods() -> list[NominatedPod]:
    """Pending pods nominated to a node, whatever their backoff: the nodes being emptied for
    them are held for them (scheduling.core.queueing.batch)."""
    return [
        NominatedPod(str(uid), node, priority)
        for uid, node, priority in Pod.objects.filter(phase=Pod.Phase.PENDING)
        .exclude(nominated_node="")
        .values_list("uid", "nominated_node", "priority")
    ]


def terminating_pods() -> frozenset[str]:
    """Pods evicted and still terminating: they hold what they hold, and are nobody's victims."""
    return frozenset(
        str(uid)
        for uid in Pod.objects.filter(phase=Pod.Phase.TERMINATING).values_list("uid", flat=True)
    )
