"""Cluster page: every node with its topology and GPU holders, the totals, the stranded count and
per-node telemetry; where the nodes carry a Topology's levels (Kueue's block > rack > node), the
domains they form with their free GPUs."""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import FilteredRelation, Max, Q
from django.utils import timezone

from dashboard.selectors import Doc, iso
from scheduling import profile_files
from scheduling.core.domains import HOSTNAME_LABEL, level_noun
from scheduling.core.scheduler import Framework
from scheduling.core.stranded import stranded_gpus
from scheduling.core.types import MILLI_PER_GPU, SharingMode
from scheduling.models import Gpu, GpuAssignment, Node, Topology
from scheduling.worker import cluster_state
from scheduling.worker.cache import ClusterCache
from telemetry import selectors as telemetry


def topology_key(doc: dict[str, Any]) -> str:
    """Nodes of one kind share one topology doc in the browser (1,000 nodes, five kinds)."""
    return hashlib.sha1(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def topology_doc(doc: dict[str, Any]) -> Doc:
    return {
        "numa": list(doc.get("gpu_numa", [])),
        "switch": list(doc.get("gpu_switch", [])),
        "links": [list(row) for row in doc.get("links", [])],
        "numa_cpus": list(doc.get("numa_cpus", [])),
    }


@dataclass
class NodeDocs:
    nodes: dict[str, Doc]
    topologies: dict[str, Doc]


def topology_levels() -> list[str]:
    """The node labels the Cluster page groups nodes by, widest first: the levels above the node
    (kubernetes.io/hostname is the node itself) of the first Topology, by name, whose levels some
    node carries all of; [] (the page stays flat) when none does."""
    for levels in Topology.objects.order_by("name").values_list("levels", flat=True):
        above = [str(label) for label in levels if label != HOSTNAME_LABEL]
        carried = Q()
        for label in above:
            carried &= Q(labels__has_key=label)
        if above and Node.objects.filter(carried).exists():
            return above
    return []


def levels_doc(levels: list[str]) -> Doc:
    """The grouping's levels: their labels and how the page names them ("block", "rack")."""
    return {"labels": levels, "nouns": [level_noun(label) for label in levels]}


def cluster_nodes(
    names: Collection[str] | None = None, levels: list[str] | None = None
) -> NodeDocs:
    """Every node (or the named ones) as the Cluster page draws it: topology, CPU and memory in
    use, per GPU the milli in use and its holders (tenant, workload, pod, milli, MIG slot), and
    its domain under `levels` (label values widest first; None without all of them)."""
    levels = topology_levels() if levels is None else levels
    nodes = Node.objects.order_by("name")
    if names is not None:
        nodes = nodes.filter(name__in=list(names))
    rows = list(
        nodes.values_list(
            "id",
            "name",
            "cordoned",
            "source",
            "cpu_milli",
            "cpu_used_milli",
            "memory_mib",
            "memory_used_mib",
            "topology",
            "labels",
        )
    )
    # Each GPU with its active holders, one row per holder (or one with none): one query, not two.
    gpus = Gpu.objects.annotate(
        held=FilteredRelation("assignments", condition=Q(assignments__active=True))
    ).order_by("node_id", "index")
    if names is not None:
        gpus = gpus.filter(node_id__in=[row[0] for row in rows])
    gpus_of: dict[int, list[Doc]] = defaultdict(list)
    models: dict[int, Counter[str]] = defaultdict(Counter)
    memory: dict[int, int] = {}
    docs: dict[int, Doc] = {}
    for (
        gpu_id,
        node_id,
        index,
        model,
        memory_mib,
        sharing,
        mig_layout,
        used,
        milli,
        slot,
        state,
        pod,
        tenant,
        workload,
    ) in gpus.values_list(
        "id",
        "node_id",
        "index",
        "model",
        "memory_mib",
        "sharing",
        "mig_layout",
        "used_milli",
        "held__milli",
        "held__mig_slot",
        "held__allocation__state",
        "held__allocation__pod__name",
        "held__allocation__pod__workload__tenant__name",
        "held__allocation__pod__workload__name",
    ):
        doc = docs.get(gpu_id)
        if doc is None:
            doc = docs[gpu_id] = {"i": index, "sharing": sharing, "used": used, "holders": []}
            if mig_layout:
                doc["mig"] = list(mig_layout)
            gpus_of[node_id].append(doc)
            models[node_id][model] += 1
            memory[node_id] = max(memory.get(node_id, 0), memory_mib)
        if milli is not None:
            doc["holders"].append([tenant, workload, pod, milli, slot, state == "reserved"])
    for doc in docs.values():
        doc["holders"].sort(key=lambda h: (h[4] or 0, h[2]))
    # A free GPU's last release: a reading taken before it still names the pods that left, and
    # the Node page flags pods on a free GPU only from a reading taken after it.
    free = [gpu_id for gpu_id, doc in docs.items() if not doc["holders"]]
    for gpu_id, released in (
        GpuAssignment.objects.filter(gpu_id__in=free, allocation__released_at__isnull=False)
        .values_list("gpu_id")
        .annotate(released=Max("allocation__released_at"))
        .order_by()
    ):
        docs[gpu_id]["released"] = int(released.timestamp())
    result = NodeDocs({}, {})
    for node_id, name, cordoned, source, cpu, cpu_used, mem, mem_used, topology, labels in rows:
        key = None
        if topology:
            key = topology_key(topology)
            result.topologies.setdefault(key, topology_doc(topology))
        result.nodes[name] = {
            "name": name,
            "cordoned": cordoned,
            "source": source,
            "model": models[node_id].most_common(1)[0][0] if models[node_id] else "",
            "gpu_memory_mib": memory.get(node_id, 0),
            "topology": key,
            "cpu": [cpu_used, cpu],
            "memory": [mem_used, mem],
            "gpus": gpus_of[node_id],
            "domain": _domain_of(labels, levels),
        }
    return result


def node_domain(name: str | None) -> list[list[str]] | None:
    """Where a node sits in the page's grouping, widest level first: [["block", "b1"], ["rack",
    "b1-r2"]]; None for no node, no grouping or a node without the levels' labels."""
    levels = topology_levels() if name else []
    labels = (
        Node.objects.filter(name=name).values_list("labels", flat=True).first() if levels else None
    )
    path = _domain_of(labels or {}, levels)
    if path is None:
        return None
    return [[level_noun(label), value] for label, value in zip(levels, path, strict=True)]


def _domain_of(labels: Mapping[str, object], levels: list[str]) -> list[str] | None:
    values = [labels.get(label) for label in levels]
    if not levels or any(v is None for v in values):
        return None
    return [str(v) for v in values]


def free_gpus(node: Doc) -> int:
    """Whole GPUs nobody holds on a node doc (MIG GPUs are counted by their slices, never
    whole): what the Cluster page calls free, in its totals and per domain."""
    return sum(1 for gpu in node["gpus"] if gpu["sharing"] != SharingMode.MIG and gpu["used"] == 0)


def domain_free_gpus(nodes: Mapping[str, Doc]) -> dict[str, Doc]:
    """Each domain the node docs form (every prefix of their `domain`, keyed "b1", "b1/r1"):
    its depth, nodes, GPUs and free GPUs on schedulable nodes (as the totals count them)."""
    domains: dict[str, Doc] = {}
    for node in nodes.values():
        path = node.get("domain")
        if not path:
            continue
        for depth in range(1, len(path) + 1):
            key = "/".join(path[:depth])
            doc = domains.setdefault(
                key, {"depth": depth - 1, "name": path[depth - 1], "nodes": 0, "gpus": 0, "free": 0}
            )
            doc["nodes"] += 1
            doc["gpus"] += len(node["gpus"])
            doc["free"] += 0 if node["cordoned"] else free_gpus(node)
    return domains


def cluster_summary(nodes: Mapping[str, Doc]) -> Doc:
    """Totals for the Cluster page, computed from the node docs of `cluster_nodes()`."""
    total = used_milli = mig_gpus = free = cordoned_free = cordoned = 0
    for node in nodes.values():
        free_here = free_gpus(node)
        for gpu in node["gpus"]:
            total += 1
            if gpu["sharing"] == SharingMode.MIG:  # its slices, or none yet: never a whole GPU
                mig_gpus += 1
                continue
            used_milli += gpu["used"]
        if node["cordoned"]:
            cordoned += 1
            cordoned_free += free_here
        else:
            free += free_here
    return {
        "nodes": len(nodes),
        "cordoned": cordoned,
        "gpus": total,
        "mig_gpus": mig_gpus,
        "in_use": round(used_milli / MILLI_PER_GPU, 2),
        "free": free,
        "cordoned_free": cordoned_free,
    }


def cluster_stranded(cluster: ClusterCache | None = None) -> Doc:
    """The stranded count: whole GPUs free on schedulable nodes where no waiting GPU pod fits,
    judged by the scheduler's own filters (scheduling.core.stranded) on the scheduler's snapshot,
    read through `cluster` (a live view keeps one current from the outbox) or afresh."""
    state = cluster.state() if cluster is not None else cluster_state.cluster_state()
    stranded = stranded_gpus(_filters(), state.snapshot, cluster_state.waiting_shapes())
    return {
        "stranded": stranded.gpus,
        "stranded_nodes": stranded.nodes,
        "pending_shapes": stranded.shapes,
        "shapes_judged": stranded.judged,
    }


@functools.cache
def _filters() -> Framework:
    """The default profile's PreFilter and Filter phases: every shipped profile filters with
    NodeResourcesFit (and GPUTopology), so the count does not depend on which one the scheduler
    runs."""
    return Framework(profile_files.load_profile(profile_files.DEFAULT))


def cluster_telemetry(now: datetime | None = None, nodes: Iterable[str] = ()) -> dict[str, Doc]:
    """Per node: freshness ("fresh", "stale", "missing") and each GPU's busy percent. The age is
    left to the browser (from `at`), so a doc changes only when a new reading arrives."""
    now = now or timezone.now()
    names = list(nodes)
    loads = telemetry.gpu_loads(now=now, nodes=names)
    freshness = telemetry.node_freshness(now=now, nodes=names)
    result: dict[str, Doc] = {}
    for name, fresh in freshness.items():
        if names and name not in names:
            continue
        result[name] = {
            "state": fresh.state,
            "at": int(fresh.last_sample_at.timestamp()) if fresh.last_sample_at else None,
            "busy": {},
        }
    for (node, index), load in loads.items():
        doc = result.setdefault(node, {"state": "fresh", "at": None, "busy": {}})
        doc["busy"][str(index)] = None if load.busy is None else round(load.busy * 100)
        if load.stale:
            doc["state"] = "stale"
    return result


def telemetry_sources(now: datetime | None = None) -> dict[str, Doc]:
    """Each telemetry source (DCGM scrape, Prometheus) as its last attempts left it: failing
    ones with their error, working ones with what they left out (a cap reached, series on no
    node of the cluster), so an admin sees on the page what /metrics counts."""
    return {
        status.name: {
            "name": status.name,
            "ok": status.consecutive_failures == 0,
            "failures": status.consecutive_failures,
            "failures_total": status.failures_total,
            "error": status.last_error if status.consecutive_failures else "",
            "warning": "" if status.consecutive_failures else status.last_warning,
            "last_success": iso(status.last_success_at),
            "last_attempt": iso(status.last_attempt_at),
            "gpus": status.last_gpus,
        }
        for status in telemetry.source_statuses()
    }
