"""Queues page: cluster and local queues, and the workloads waiting with position and reason."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from dashboard.selectors import Doc, iso
from scheduling import pod_resources
from scheduling.core.types import (
    MILLI_PER_GPU,
)
from scheduling.models import (
    ClusterQueue,
    Pod,
    Workload,
)
from scheduling.selectors import cohorts as queue_selectors
from scheduling.selectors import queue_counts, why_pending
from scheduling.selectors import queue_sources as source_selectors
from scheduling.selectors import queues as scheduling_selectors

PENDING_SHOWN = 500


def cluster_queues() -> dict[str, Doc]:
    """Each ClusterQueue as Kueue reports it: quota, use and borrowing per flavor and resource,
    fair share, and how many workloads it admitted and holds back."""
    result: dict[str, Doc] = {}
    deleted = source_selectors.cluster_queues_deleted_from_source()
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
            "consolidation": status.consolidation,
            # Deleted from the cluster, kept terminating while it holds admitted workloads.
            "deleted_from_cluster_at": iso(deleted.get(status.name)),
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
    ClusterQueue and counts (scheduling.selectors.queue_counts, the REST API's and /metrics'
    too), and its admission fair-sharing usage."""
    result: dict[str, Doc] = {}
    for (namespace, name), counts in queue_counts.local_queue_counts().items():
        result[f"{namespace}/{name}"] = {
            "namespace": namespace,
            "name": name,
            "cluster_queue": counts.cluster_queue,
            "waiting_for_quota": counts.waiting_for_quota,
            "admitted": counts.admitted,
            "running": counts.running,
            "pods_waiting_for_quota": counts.pods_waiting_for_quota,
            "pods_waiting_for_node": counts.pods_waiting_for_node,
            "gpus": counts.gpus_held,
            "fair_usage": None,  # admission fair sharing: decayed usage and rank in its queue
        }
    for key, usage in queue_selectors.local_queue_fair_usage().items():
        if key in result:
            result[key]["fair_usage"] = {
                "consumed": usage.consumed,
                "usage": round(usage.usage, 6) if math.isfinite(usage.usage) else None,
                "rank": usage.rank,
                "weight": usage.weight,
            }
    return result


@dataclass
class WaitingDocs:
    """The waiting workloads as three slices: what each is (changes when its reason or pods do),
    its place in line (changes for everyone behind a workload that leaves), and its estimated
    start (moves with the clock, sampled)."""

    docs: dict[str, Doc]
    positions: dict[str, Doc]
    starts: dict[str, Doc]


def pending_workloads(limit: int | None = None) -> WaitingDocs:
    """The workloads waiting for quota or for nodes (the first `limit`, in queue order), each
    with its queue, reason and what it asks for. Positions are a slice of their own, of small
    docs: when the head of a queue is admitted, every workload behind it moves up one, and the
    delta carries those few bytes each rather than every doc again."""
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
    result = WaitingDocs({}, {}, {})
    for order, item in enumerate(shown):
        w = item.workload
        uid = str(w.uid)
        ask = asks.get(w.pk, {})
        result.docs[uid] = {
            "uid": uid,
            "workload": w.name,
            "tenant": w.tenant.name,
            "state": w.state,
            "cluster_queue": item.cluster_queue,
            "local_queue": item.local_queue,
            "reason": item.reason,
            "message": item.message or ask.get("detail", ""),
            "would_fit": ask.get("fit"),  # waiting for nodes: what would make it fit
            "priority": w.priority,
            "created": iso(w.created_at),
            "pods": ask.get("pods", 0),
            "pending_pods": ask.get("pending", 0),
            "request": ask.get("request", ""),
        }
        # p: place in its cluster queue (or among admitted workloads waiting for nodes);
        # o: the order of the whole line, which the browser sorts by.
        result.positions[uid] = {"p": item.position, "o": order}
        # basis: what the run times it rests on come from (learned, or a prior), issue 37
        estimate = item.estimate
        result.starts[uid] = {
            "start": iso(estimate.p50 if estimate else None),
            "basis": estimate.runtime_basis if estimate else "",
            "unknown": estimate.unknown_reason if estimate else "",
        }
    return result


def _asks(workload_ids: list[int]) -> dict[int, Doc]:
    """Per workload: its active pods, how many still wait, what they ask for in total, and why
    the first waiting pod could not be placed (its line, and what would make it fit)."""
    result: dict[int, Doc] = {}
    rows = (
        Pod.objects.filter(workload_id__in=workload_ids, phase__in=Pod.ACTIVE_PHASES)
        .order_by("workload_id", "id")
        .values_list(
            "workload_id", "phase", "last_reason", "pending_explanation", *pod_resources.COLUMNS
        )
    )
    for wid, phase, reason, explained, *columns in rows:
        resources = pod_resources.from_values(columns)
        doc = result.setdefault(
            wid,
            {"pods": 0, "pending": 0, "milli": 0, "mig": Counter(), "detail": "", "fit": None},
        )
        doc["pods"] += 1
        doc["milli"] += resources.gpus * MILLI_PER_GPU + resources.gpu_milli
        if resources.mig_count:
            doc["mig"][resources.mig_profile] += resources.mig_count
        if phase == Pod.Phase.PENDING:
            doc["pending"] += 1
            if not doc["detail"] and reason:
                doc["detail"] = reason
                why = why_pending.current(explained, reason)
                doc["fit"] = why.would_fit if why else None
    for doc in result.values():
        parts = []
        if doc["milli"]:
            parts.append(f"{doc['milli'] / MILLI_PER_GPU:g} GPU")
        parts += [f"{count}x {profile}" for profile, count in sorted(doc.pop("mig").items())]
        doc["request"] = " + ".join(parts) or "CPU only"
        del doc["milli"]
    return result


def queue_summary() -> Doc:
    """The Queues page's totals, summed from the one read model (scheduling.selectors.queue_counts):
    workloads waiting for quota, admitted workloads with pods still waiting for a node, admitted
    workloads (running or not) and of them running; pods waiting for quota and for a node."""
    totals = list(queue_counts.local_queue_counts().values())
    unplaced = (
        Workload.objects.filter(
            state__in=queue_counts.ADMITTED_STATES, pods__phase=Pod.Phase.PENDING
        )
        .distinct()
        .count()
    )
    return {
        "waiting_for_quota": sum(q.waiting_for_quota for q in totals),
        "waiting_for_nodes": unplaced,
        "admitted": sum(q.admitted for q in totals),
        "running": sum(q.running for q in totals),
        "pods_waiting_for_quota": sum(q.pods_waiting_for_quota for q in totals),
        "pods_waiting_for_node": sum(q.pods_waiting_for_node for q in totals),
        "cluster_queues": ClusterQueue.objects.count(),
    }


def queue_source() -> Doc:
    """Where the queues come from, and why the cluster's Kueue objects are refused if they are."""
    source = queue_selectors.queue_source()
    return {
        "kind": source.kind,
        "applied_at": iso(source.applied_at),
        "error": source.error,
        "error_since": iso(source.error_since),
        "notes": list(source.notes),
    }
