"""The cluster's limits (what the largest node can offer), flavors with their free capacity,
and nodes."""

from __future__ import annotations

import re
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, Max, OuterRef, Q, QuerySet, Sum

from api.exceptions import NotFound
from api.specs import ClusterLimits, ModelInfo
from scheduling.core.types import MILLI_PER_GPU, SharingMode
from scheduling.models import (
    Gpu,
    GpuAssignment,
    Node,
    NodeAction,
    ResourceFlavor,
    Topology,
)

PRODUCT_LABEL = "nvidia.com/gpu.product"

# --- the cluster's limits (what the largest node can offer) ------------------------------------

_limits_lock = threading.Lock()
_limits_cache: dict[tuple[Any, ...], ClusterLimits] = {}


def topology_levels() -> dict[str, list[str]]:
    """Each Topology's levels (node labels, widest first), by name."""
    return {t.name: list(t.levels) for t in Topology.objects.order_by("name")}


def cluster_limits() -> ClusterLimits:
    """Per GPU model: most GPUs on one node, MIG profiles, sharing; the largest CPU and memory.
    Recomputed only when a node is registered or changed (keyed by count and last update)."""
    stamp = Node.objects.aggregate(n=Count("id"), changed=Max("updated_at"))
    key = (stamp["n"], stamp["changed"])
    with _limits_lock:
        cached = _limits_cache.get(key)
    if cached is not None:
        return cached
    largest = Node.objects.aggregate(cpu=Max("cpu_milli"), memory=Max("memory_mib"))
    per_node = (
        Gpu.objects.values("node_id", "model").annotate(n=Count("id")).values_list("model", "n")
    )
    most: dict[str, int] = defaultdict(int)
    for model, n in per_node:
        most[model] = max(most[model], n)
    mig: dict[str, set[str]] = defaultdict(set)
    shareable: set[str] = set()
    shareable_modes = [m.value for m in SharingMode if m.shareable]
    for model, layout in (
        Gpu.objects.filter(sharing=SharingMode.MIG.value)
        .values_list("model", "mig_layout")
        .distinct()
    ):
        mig[model].update(str(p) for p in layout)
    shareable.update(
        Gpu.objects.filter(sharing__in=shareable_modes).values_list("model", flat=True).distinct()
    )
    limits = ClusterLimits(
        models={
            model: ModelInfo(n, frozenset(mig.get(model, ())), model in shareable)
            for model, n in most.items()
        },
        max_cpu_milli=largest["cpu"] or 0,
        max_memory_mib=largest["memory"] or 0,
        nodes=stamp["n"],
    )
    with _limits_lock:
        _limits_cache.clear()
        _limits_cache[key] = limits
    return limits


# --- flavors and free capacity ----------------------------------------------------------------


def flavor_name(model: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "gpu"


@dataclass(frozen=True)
class FlavorView:
    name: str
    gpu_model: str
    node_labels: dict[str, str]
    nodes: int
    cordoned_nodes: int
    gpus: int
    gpus_free: int  # whole GPUs nobody holds, on schedulable nodes
    largest_free_block: int  # most free whole GPUs on one schedulable node
    shared_milli_free: int  # spare milli on shared (time-slicing / MPS) GPUs, schedulable nodes
    mig_gpus: int


@dataclass
class _NodeCapacity:
    labels: dict[str, str]
    cordoned: bool
    model: str
    gpus: int = 0
    free: int = 0  # whole GPUs nobody holds
    shared_free_milli: int = 0
    mig: int = 0


def _node_capacity() -> list[_NodeCapacity]:
    busy_mig = GpuAssignment.objects.filter(gpu=OuterRef("pk"), active=True)
    shareable = [m.value for m in SharingMode if m.shareable]
    stats = {
        row["node_id"]: row
        for row in Gpu.objects.annotate(mig_busy=Exists(busy_mig))
        .values("node_id")
        .annotate(
            n=Count("id"),
            free=Count("id", filter=Q(used_milli=0, mig_busy=False)),
            mig=Count("id", filter=Q(sharing=SharingMode.MIG.value)),
            shared_n=Count("id", filter=Q(sharing__in=shareable)),
            shared_used=Sum("used_milli", filter=Q(sharing__in=shareable)),
            model=Max("model"),
        )
    }
    out = []
    for node_id, labels, cordoned in Node.objects.values_list("id", "labels", "cordoned"):
        row = stats.get(node_id)
        if row is None:
            out.append(_NodeCapacity(dict(labels), cordoned, ""))
            continue
        out.append(
            _NodeCapacity(
                labels=dict(labels),
                cordoned=cordoned,
                model=row["model"],
                gpus=row["n"],
                free=row["free"],
                shared_free_milli=row["shared_n"] * MILLI_PER_GPU - (row["shared_used"] or 0),
                mig=row["mig"],
            )
        )
    return out


def _flavor_view(
    name: str, model: str, labels: dict[str, str], nodes: list[_NodeCapacity]
) -> FlavorView:
    schedulable = [n for n in nodes if not n.cordoned]
    return FlavorView(
        name=name,
        gpu_model=model,
        node_labels=labels,
        nodes=len(nodes),
        cordoned_nodes=len(nodes) - len(schedulable),
        gpus=sum(n.gpus for n in nodes),
        gpus_free=sum(n.free for n in schedulable),
        largest_free_block=max((n.free for n in schedulable), default=0),
        shared_milli_free=sum(n.shared_free_milli for n in schedulable),
        mig_gpus=sum(n.mig for n in nodes),
    )


def by_gpu_model(nodes: list[_NodeCapacity] | None = None) -> list[FlavorView]:
    """Capacity per GPU model (nodes labelled nvidia.com/gpu.product)."""
    by_model: dict[str, list[_NodeCapacity]] = defaultdict(list)
    for n in nodes if nodes is not None else _node_capacity():
        if n.model:
            by_model[n.model].append(n)
    return [
        _flavor_view(flavor_name(model), model, {PRODUCT_LABEL: model}, members)
        for model, members in sorted(by_model.items())
    ]


def flavors(nodes: list[_NodeCapacity] | None = None) -> list[FlavorView]:
    """The cluster's ResourceFlavors with the capacity of the nodes they select (all node labels
    match). Without ResourceFlavor rows, one flavor per GPU model."""
    nodes = nodes if nodes is not None else _node_capacity()
    rows = list(ResourceFlavor.objects.order_by("name"))
    if rows:
        out = []
        for flavor in rows:
            labels = {str(k): str(v) for k, v in flavor.node_labels.items()}
            members = [n for n in nodes if all(n.labels.get(k) == v for k, v in labels.items())]
            models = sorted({n.model for n in members if n.model})
            out.append(_flavor_view(flavor.name, ",".join(models), labels, members))
        return out
    return by_gpu_model(nodes)


@dataclass(frozen=True)
class CapacityView:
    nodes: int
    schedulable_nodes: int
    cpu_milli_free: int
    memory_mib_free: int
    flavors: list[FlavorView]
    gpu_models: list[FlavorView]


def capacity() -> CapacityView:
    nodes = _node_capacity()
    schedulable = Node.objects.filter(cordoned=False)
    free = schedulable.aggregate(
        cpu=Sum("cpu_milli"),
        cpu_used=Sum("cpu_used_milli"),
        memory=Sum("memory_mib"),
        memory_used=Sum("memory_used_mib"),
    )
    return CapacityView(
        nodes=Node.objects.count(),
        schedulable_nodes=schedulable.count(),
        cpu_milli_free=(free["cpu"] or 0) - (free["cpu_used"] or 0),
        memory_mib_free=(free["memory"] or 0) - (free["memory_used"] or 0),
        flavors=flavors(nodes),
        gpu_models=by_gpu_model(nodes),
    )


# --- nodes --------------------------------------------------------------------------------------


def nodes_query(*, cordoned: bool | None = None, gpu_model: str | None = None) -> QuerySet[Node]:
    qs = Node.objects.all()
    if cordoned is not None:
        qs = qs.filter(cordoned=cordoned)
    if gpu_model:
        qs = qs.filter(gpus__model=gpu_model).distinct()
    return qs.order_by("name")


def node_get(name: str) -> Node:
    node = Node.objects.filter(name=name).first()
    if node is None:
        raise NotFound(f"node {name!r} not found")
    return node


def node_action_get(action_id: int) -> NodeAction:
    action = NodeAction.objects.filter(pk=action_id).first()
    if action is None:
        raise NotFound(f"node action {action_id} not found")
    return action


def node_gpus(nodes: Sequence[Node]) -> dict[int, list[Gpu]]:
    out: dict[int, list[Gpu]] = defaultdict(list)
    for gpu in Gpu.objects.filter(node__in=list(nodes)).order_by("node_id", "index"):
        out[gpu.node_id].append(gpu)
    return out
