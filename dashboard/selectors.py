"""Page data for the dashboard (HackSoft selectors): plain JSON-ready dicts, read in full for a
snapshot or for a few keys for a delta. Only reads; every query is bounded by the cluster size or
by an explicit window.

Docs are keyed the way the browser keeps them (node name, decision id, pod uid, tenant name), so a
delta is "these keys now look like this" and the same code builds both a snapshot and a delta.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from scheduling import queue_selectors
from scheduling import selectors as scheduling_selectors
from scheduling.cluster_state import topology_from_json
from scheduling.core.gpu_sets import GpuSetChooser, Requirement
from scheduling.core.topology import uniform
from scheduling.core.types import (
    MILLI_PER_GPU,
    PodRequest,
    SharingMode,
    TopologyPolicy,
    TopologyScope,
)
from scheduling.models import (
    ClusterQueue,
    Event,
    Gpu,
    GpuAssignment,
    LocalQueue,
    Node,
    PlacementDecision,
    Pod,
    Tenant,
    Workload,
)
from telemetry import conf as telemetry_conf
from telemetry import selectors as telemetry
from telemetry.models import GpuLatest, GpuMinute

Doc = dict[str, Any]

DECISIONS_SHOWN = 100
PENDING_SHOWN = 500
SERIES_WINDOW = timedelta(hours=1)
SHAREABLE = frozenset(mode.value for mode in SharingMode if mode.shareable)


def head_event_id() -> int:
    """The newest committed outbox id: a state read after this includes every change up to it."""
    return Event.objects.aggregate(newest=Max("id"))["newest"] or 0


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


# --- cluster: nodes with their topology and who holds each GPU --------------------------------


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


def cluster_nodes(names: Collection[str] | None = None) -> NodeDocs:
    """Every node (or the named ones) as the Cluster page draws it: topology, CPU and memory in
    use, and per GPU the milli in use and its holders (tenant, workload, pod, milli, MIG slot)."""
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
        )
    )
    gpus = Gpu.objects.order_by("node_id", "index")
    assignments = GpuAssignment.objects.filter(active=True)
    if names is not None:
        ids = [row[0] for row in rows]
        gpus = gpus.filter(node_id__in=ids)
        assignments = assignments.filter(gpu__node_id__in=ids)
    holders: dict[int, list[list[Any]]] = defaultdict(list)
    for gpu_id, milli, slot, state, pod, tenant, workload in assignments.values_list(
        "gpu_id",
        "milli",
        "mig_slot",
        "allocation__state",
        "allocation__pod__name",
        "allocation__pod__workload__tenant__name",
        "allocation__pod__workload__name",
    ):
        holders[gpu_id].append([tenant, workload, pod, milli, slot, state == "reserved"])
    gpus_of: dict[int, list[Doc]] = defaultdict(list)
    models: dict[int, Counter[str]] = defaultdict(Counter)
    memory: dict[int, int] = {}
    for gpu_id, node_id, index, model, memory_mib, sharing, mig_layout, used in gpus.values_list(
        "id", "node_id", "index", "model", "memory_mib", "sharing", "mig_layout", "used_milli"
    ):
        doc: Doc = {
            "i": index,
            "sharing": sharing,
            "used": used,
            "holders": sorted(holders.get(gpu_id, []), key=lambda h: (h[4] or 0, h[2])),
        }
        if mig_layout:
            doc["mig"] = list(mig_layout)
        gpus_of[node_id].append(doc)
        models[node_id][model] += 1
        memory[node_id] = max(memory.get(node_id, 0), memory_mib)
    result = NodeDocs({}, {})
    for node_id, name, cordoned, source, cpu, cpu_used, mem, mem_used, topology in rows:
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
        }
    return result


@dataclass(frozen=True)
class _Demand:
    """One distinct shape among the pending pods (what the stranded count is measured against)."""

    gpus: int
    gpu_milli: int
    cpu_milli: int
    memory_mib: int
    models: frozenset[str]
    requirement: Requirement


def _pending_demands() -> list[_Demand]:
    rows = (
        Pod.objects.filter(
            phase=Pod.Phase.PENDING,
            workload__state__in=Workload.ACTIVE_STATES,
        )
        .filter(Q(gpus__gt=0) | Q(gpu_milli__gt=0))
        .order_by()
        .values_list(
            "gpus",
            "gpu_milli",
            "cpu_milli",
            "memory_mib",
            "gpu_models",
            "topology_policy",
            "topology_scope",
        )
        .distinct()
    )
    demands = set()
    for gpus, milli, cpu, mem, models, policy, scope in rows:
        request = PodRequest(
            uid="",
            gpus=gpus,
            gpu_milli=milli,
            topology_policy=TopologyPolicy(policy) if policy else None,
            topology_scope=TopologyScope(scope) if scope else None,
        )
        demands.add(
            _Demand(gpus, milli, cpu, mem, frozenset(models or ()), Requirement.of(request))
        )
    return sorted(demands, key=repr)


def cluster_summary(nodes: Mapping[str, Doc], topologies: Mapping[str, Doc]) -> Doc:
    """Totals for the Cluster page, computed from the node docs of `cluster_nodes()`, with the
    stranded count: whole GPUs free on schedulable nodes where no pending GPU pod fits (too few
    GPUs close enough together for its topology policy, too little CPU or memory left beside
    them, or the wrong model). Only the pending pods' shapes are read here."""
    demands = _pending_demands()
    total = used_milli = mig_gpus = free = cordoned_free = stranded = stranded_nodes = 0
    cordoned = 0
    for node in nodes.values():
        free_mask = share_free = 0
        for gpu in node["gpus"]:
            total += 1
            if gpu.get("mig"):
                mig_gpus += 1
                continue
            used_milli += gpu["used"]
            if gpu["used"] == 0:
                free_mask |= 1 << gpu["i"]
            if gpu["sharing"] in SHAREABLE:
                share_free = max(share_free, MILLI_PER_GPU - gpu["used"])
        free_here = free_mask.bit_count()
        if node["cordoned"]:
            cordoned += 1
            cordoned_free += free_here
            continue
        free += free_here
        if not free_here or not demands:
            continue
        chooser = _chooser(node["topology"], topologies.get(node["topology"] or ""), node["gpus"])
        room = (
            share_free,
            node["cpu"][1] - node["cpu"][0],
            node["memory"][1] - node["memory"][0],
            node["model"],
        )
        if not any(_fits(demand, chooser, free_mask, *room) for demand in demands):
            stranded += free_here
            stranded_nodes += 1
    return {
        "nodes": len(nodes),
        "cordoned": cordoned,
        "gpus": total,
        "mig_gpus": mig_gpus,
        "in_use": round(used_milli / MILLI_PER_GPU, 2),
        "free": free,
        "cordoned_free": cordoned_free,
        "stranded": stranded,
        "stranded_nodes": stranded_nodes,
        "pending_shapes": len(demands),
    }


# One chooser per kind of node, kept across calls: its GPU-set tables are built on first use.
_CHOOSERS: dict[str, GpuSetChooser] = {}


def _chooser(key: str | None, topology: Doc | None, gpus: list[Doc]) -> GpuSetChooser:
    if key is None or topology is None:
        key, topology = f"uniform-{len(gpus)}", None
    chooser = _CHOOSERS.get(key)
    if chooser is None:
        chooser = GpuSetChooser(
            uniform(len(gpus))
            if topology is None
            else topology_from_json(
                {
                    "gpu_numa": topology["numa"],
                    "gpu_switch": topology["switch"],
                    "links": topology["links"],
                    "numa_cpus": topology["numa_cpus"],
                }
            )
        )
        _CHOOSERS[key] = chooser
    return chooser


def _fits(
    demand: _Demand,
    chooser: GpuSetChooser,
    free_mask: int,
    share_free: int,
    cpu_free: int,
    memory_free: int,
    model: str,
) -> bool:
    if demand.cpu_milli > cpu_free or demand.memory_mib > memory_free:
        return False
    if demand.models and model not in demand.models:
        return False
    if demand.gpu_milli:
        return share_free >= demand.gpu_milli
    if demand.gpus > chooser.gpu_count:
        return False
    masks = np.array([free_mask], dtype=np.int64)
    return bool(chooser.ranks(masks, demand.gpus, demand.requirement)[0] > 0)


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


# --- node detail: one node's GPUs over time -------------------------------------------------


def node_gpu_telemetry(name: str, now: datetime | None = None) -> dict[str, Doc]:
    """The latest reading of each GPU (and MIG instance) of one node, keyed by GPU index."""
    now = now or timezone.now()
    window = telemetry_conf.freshness().total_seconds()
    result: dict[str, Doc] = {}
    for row in GpuLatest.objects.filter(node=name).order_by("gpu_index", "mig_instance"):
        age = max((now - row.sampled_at).total_seconds(), 0.0)
        doc = result.setdefault(
            str(row.gpu_index),
            {"uuid": row.uuid, "model": row.model_name, "at": 0, "stale": False, "mig": []},
        )
        values = {
            "busy": _pct(row.busy),
            "fb_used_mib": _round(row.fb_used_mib),
            "fb_free_mib": _round(row.fb_free_mib),
            "power_w": _round(row.power_w),
            "temp_c": _round(row.temp_c),
            "xid": row.xid_last,
            "pods": [f"{pod[0]}/{pod[1]}" for pod in row.pods if len(pod) >= 2],
        }
        doc["at"] = max(doc["at"], int(row.sampled_at.timestamp()))
        doc["stale"] = doc["stale"] or age > window
        if row.mig_instance:
            doc["mig"].append({"instance": row.mig_instance, "profile": row.mig_profile, **values})
        else:
            doc.update(values)
    for doc in result.values():
        if doc["mig"] and "busy" not in doc:  # a MIG GPU: its instances, summed up
            busy = [m["busy"] for m in doc["mig"] if m["busy"] is not None]
            doc["busy"] = round(sum(busy) / len(busy)) if busy else None
            for field in ("fb_used_mib", "fb_free_mib"):
                parts = [m[field] for m in doc["mig"] if m[field] is not None]
                doc[field] = round(sum(parts), 1) if parts else None
            doc["pods"] = sorted({pod for m in doc["mig"] for pod in m["pods"]})
    return result


def node_gpu_series(name: str, now: datetime | None = None) -> dict[str, Doc]:
    """Per GPU of one node: the last hour of 1-minute rollups (busy %, framebuffer, power). A MIG
    GPU's instances are folded into their GPU: mean busy, peak busy, summed framebuffer."""
    now = now or timezone.now()
    rows = (
        GpuMinute.objects.filter(node=name, minute__gte=now - SERIES_WINDOW)
        .order_by("gpu_index", "minute", "mig_instance")
        .values_list("gpu_index", "minute", "busy_avg", "busy_max", "fb_used_avg", "power_avg")
    )
    minutes: dict[tuple[int, datetime], list[tuple[float | None, ...]]] = defaultdict(list)
    for index, minute, *values in rows:
        minutes[(index, minute)].append(tuple(values))
    result: dict[str, Doc] = {}
    for (index, minute), parts in minutes.items():
        doc = result.setdefault(
            str(index), {"t": [], "busy": [], "busy_max": [], "fb_used_mib": [], "power_w": []}
        )
        busy, peak, fb, power = zip(*parts, strict=True)
        doc["t"].append(int(minute.timestamp()))
        doc["busy"].append(_pct(_mean(busy)))
        doc["busy_max"].append(_pct(max((v for v in peak if v is not None), default=None)))
        doc["fb_used_mib"].append(_round(_total(fb)))
        doc["power_w"].append(_round(_total(power)))
    return result


def _mean(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) / len(present) if present else None


def _total(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return sum(present) if present else None


def _pct(value: float | None) -> int | None:
    return None if value is None else round(value * 100)


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


# --- placements: the decision feed -------------------------------------------------------------


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
        "at": _iso(row.created_at),
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
    """One decision with its full explanation (per node and plugin), for the detail panel."""
    row = (
        PlacementDecision.objects.filter(pk=decision_id)
        .select_related("pod__workload__tenant")
        .first()
    )
    if row is None:
        return None
    return {**_decision_doc(row), "explanation": row.explanation or {}}


# --- queues: cluster and local queues, pending workloads -----------------------------------------


def cluster_queues() -> dict[str, Doc]:
    """Each ClusterQueue as Kueue reports it: quota, use and borrowing per flavor and resource,
    fair share, and how many workloads it admitted and holds back."""
    result: dict[str, Doc] = {}
    for status in scheduling_selectors.cluster_queue_status():
        result[status.name] = {
            "name": status.name,
            "cohort": status.cohort,
            "strategy": status.queueing_strategy,
            "weight": status.weight,
            "pending": status.pending_workloads,
            "admitted": status.admitted_workloads,
            "weighted_share": status.weighted_share,
            "dominant_resource": status.dominant_resource,
            "admission_mode": status.admission_mode,
            "stop_policy": status.stop_policy,
            "cohort_path": list(status.cohort_path),
            "flavors": [
                {
                    "flavor": flavor,
                    "resources": [
                        {
                            "name": usage.name,
                            "nominal": usage.nominal_quota,
                            "borrowing_limit": usage.borrowing_limit,
                            "lending_limit": usage.lending_limit,
                            "used": usage.total,
                            "borrowed": usage.borrowed,
                            "available": usage.available,
                        }
                        for usage in resources
                    ],
                }
                for flavor, resources in status.flavors_usage
            ],
        }
    return result


def local_queues() -> dict[str, Doc]:
    """Per LocalQueue ("namespace/name", including names workloads use that do not exist): its
    ClusterQueue, active workloads by state, pending pods and GPUs held."""
    result: dict[str, Doc] = {
        f"{namespace}/{name}": _empty_queue(namespace, name, cluster_queue)
        for namespace, name, cluster_queue in LocalQueue.objects.values_list(
            "namespace", "name", "cluster_queue__name"
        )
    }

    def queue(namespace: str, name: str) -> Doc:
        key = f"{namespace}/{name}"
        if key not in result:
            result[key] = _empty_queue(namespace, name, None)
        return result[key]

    for namespace, name, state, n in (
        Workload.objects.filter(state__in=Workload.ACTIVE_STATES)
        .values_list("tenant__namespace", "queue_name", "state")
        .annotate(n=Count("id"))
        .order_by()
    ):
        queue(namespace, name)["workloads"][state] = n
    for namespace, name, n in (
        Pod.objects.filter(phase=Pod.Phase.PENDING, workload__state__in=Workload.ACTIVE_STATES)
        .values_list("workload__tenant__namespace", "workload__queue_name")
        .annotate(n=Count("id"))
        .order_by()
    ):
        queue(namespace, name)["pending_pods"] = n
    for namespace, name, milli in (
        GpuAssignment.objects.filter(active=True, mig_slot__isnull=True)
        .values_list(
            "allocation__pod__workload__tenant__namespace",
            "allocation__pod__workload__queue_name",
        )
        .annotate(milli=Sum("milli"))
        .order_by()
    ):
        queue(namespace, name)["gpus"] = round((milli or 0) / MILLI_PER_GPU, 2)
    for key, usage in queue_selectors.local_queue_fair_usage().items():
        if key in result:
            result[key]["fair_usage"] = {
                "consumed": usage.consumed,
                "usage": round(usage.usage, 6) if math.isfinite(usage.usage) else None,
                "rank": usage.rank,
                "weight": usage.weight,
            }
    return result


def _empty_queue(namespace: str, name: str, cluster_queue: str | None) -> Doc:
    return {
        "namespace": namespace,
        "name": name,
        "cluster_queue": cluster_queue,
        "workloads": {},
        "pending_pods": 0,
        "gpus": 0,
        "fair_usage": None,  # admission fair sharing: decayed usage and rank in its queue
    }


def pending_workloads(limit: int | None = None) -> tuple[dict[str, Doc], dict[str, Doc]]:
    """The workloads waiting for quota or for nodes (the first `limit`, in queue order), each
    with its queue, position, reason and what it asks for; and their estimated starts, kept
    apart because those move with the clock rather than with the outbox."""
    waiting = scheduling_selectors.pending_workloads()
    waiting.sort(
        key=lambda p: (
            p.workload.state != Workload.State.PENDING,  # waiting for quota, then for nodes
            p.cluster_queue,
            p.position or 10**9,
            -p.workload.priority,
            p.workload.created_at,
            p.workload.pk,
        )
    )
    shown = waiting[: limit or PENDING_SHOWN]
    asks = _asks([p.workload.pk for p in shown])
    docs: dict[str, Doc] = {}
    starts: dict[str, Doc] = {}
    for rank, item in enumerate(shown):
        w = item.workload
        uid = str(w.uid)
        ask = asks.get(w.pk, {})
        docs[uid] = {
            "uid": uid,
            "rank": rank,
            "workload": w.name,
            "tenant": w.tenant.name,
            "state": w.state,
            "cluster_queue": item.cluster_queue,
            "local_queue": item.local_queue,
            "position": item.position,
            "reason": item.reason,
            "message": item.message or ask.get("detail", ""),
            "priority": w.priority,
            "created": _iso(w.created_at),
            "pods": ask.get("pods", 0),
            "pending_pods": ask.get("pending", 0),
            "request": ask.get("request", ""),
        }
        starts[uid] = {"start": _iso(item.estimated_start)}
    return docs, starts


def _asks(workload_ids: list[int]) -> dict[int, Doc]:
    """Per workload: its active pods, how many still wait, what they ask for in total, and why
    the first waiting pod could not be placed."""
    result: dict[int, Doc] = {}
    rows = (
        Pod.objects.filter(workload_id__in=workload_ids, phase__in=Pod.ACTIVE_PHASES)
        .order_by("workload_id", "id")
        .values_list(
            "workload_id", "phase", "gpus", "gpu_milli", "mig_profile", "mig_count", "last_reason"
        )
    )
    for wid, phase, gpus, milli, profile, mig, reason in rows:
        doc = result.setdefault(
            wid, {"pods": 0, "pending": 0, "milli": 0, "mig": Counter(), "detail": ""}
        )
        doc["pods"] += 1
        doc["milli"] += gpus * MILLI_PER_GPU + milli
        if mig:
            doc["mig"][profile] += mig
        if phase == Pod.Phase.PENDING:
            doc["pending"] += 1
            doc["detail"] = doc["detail"] or reason
    for doc in result.values():
        parts = []
        if doc["milli"]:
            parts.append(f"{doc['milli'] / MILLI_PER_GPU:g} GPU")
        parts += [f"{count}x {profile}" for profile, count in sorted(doc.pop("mig").items())]
        doc["request"] = " + ".join(parts) or "CPU only"
        del doc["milli"]
    return result


def queue_summary() -> Doc:
    counts = dict(
        Workload.objects.filter(state__in=Workload.ACTIVE_STATES)
        .values_list("state")
        .annotate(n=Count("id"))
        .order_by()
    )
    unplaced = (
        Workload.objects.filter(state=Workload.State.ADMITTED, pods__phase=Pod.Phase.PENDING)
        .distinct()
        .count()
    )
    return {
        "waiting_for_quota": counts.get(Workload.State.PENDING, 0),
        "waiting_for_nodes": unplaced,
        "admitted": counts.get(Workload.State.ADMITTED, 0),
        "running": counts.get(Workload.State.RUNNING, 0),
        "pending_pods": Pod.objects.filter(
            phase=Pod.Phase.PENDING, workload__state__in=Workload.ACTIVE_STATES
        ).count(),
        "cluster_queues": ClusterQueue.objects.count(),
    }


# --- tenants ----------------------------------------------------------------------------------


def tenants() -> dict[str, Doc]:
    """Per tenant, now: active workloads, pods waiting and placed, GPUs held (whole and shares,
    in GPUs) and MIG slices held."""
    quota = _gpu_quota_by_namespace()
    result: dict[str, Doc] = {
        name: {
            "name": name,
            "namespace": namespace,
            "workloads": 0,
            "pending": 0,
            "placed": 0,
            "gpus": 0,
            "mig": 0,
            "quota": quota.get(namespace),
        }
        for name, namespace in Tenant.objects.order_by("name").values_list("name", "namespace")
    }
    for name, n in (
        Workload.objects.filter(state__in=Workload.ACTIVE_STATES)
        .values_list("tenant__name")
        .annotate(n=Count("id"))
        .order_by()
    ):
        result[name]["workloads"] = n
    for name, phase, n in (
        Pod.objects.filter(phase__in=Pod.ACTIVE_PHASES)
        .values_list("workload__tenant__name", "phase")
        .annotate(n=Count("id"))
        .order_by()
    ):
        key = "pending" if phase == Pod.Phase.PENDING else "placed"
        result[name][key] += n
    for name, milli, slots in (
        GpuAssignment.objects.filter(active=True)
        .values_list("allocation__pod__workload__tenant__name")
        .annotate(milli=Sum("milli"), slots=Count("id", filter=Q(mig_slot__isnull=False)))
        .order_by()
    ):
        result[name]["gpus"] = round((milli or 0) / MILLI_PER_GPU, 2)
        result[name]["mig"] = slots
    return result


def _gpu_quota_by_namespace() -> dict[str, Doc]:
    """Per namespace: the nominal GPU quota of the cluster queues its local queues feed, and the
    other namespaces sharing those queues (a cluster queue's quota is shared by its tenants)."""
    gpus: dict[str, float] = {}
    for name, groups in ClusterQueue.objects.values_list("name", "resource_groups"):
        gpus[name] = sum(
            float(resource.get("nominalQuota", 0)) / MILLI_PER_GPU
            for group in groups
            for flavor in group.get("flavors", [])
            for resource in flavor.get("resources", [])
            if resource.get("name") == "nvidia.com/gpu"
        )
    feeds: dict[str, set[str]] = defaultdict(set)
    members: dict[str, set[str]] = defaultdict(set)
    for namespace, queue in LocalQueue.objects.values_list("namespace", "cluster_queue__name"):
        feeds[namespace].add(queue)
        members[queue].add(namespace)
    return {
        namespace: {
            "gpus": round(sum(gpus.get(queue, 0.0) for queue in sorted(queues)), 3),
            "cluster_queues": sorted(queues),
            "shared_with": sorted(set().union(*(members[q] for q in queues)) - {namespace}),
        }
        for namespace, queues in feeds.items()
    }


def tenant_series(now: datetime | None = None) -> dict[str, Doc]:
    """Per tenant, the last hour per minute: GPUs held (as DCGM saw them: what was requested and
    granted) and GPUs kept busy (average and peak), from the telemetry rollups."""
    now = now or timezone.now()
    owners = dict(Tenant.objects.values_list("namespace", "name"))
    series = telemetry.tenant_usage_series(start=now - SERIES_WINDOW, end=now, tenants=owners)
    return {
        tenant: {
            "t": [int(p.minute.timestamp()) for p in points],
            "held": [round(p.gpus, 2) for p in points],
            "used": [round(p.used_avg, 2) for p in points],
            "peak": [round(p.used_max, 2) for p in points],
        }
        for tenant, points in series.items()
    }
