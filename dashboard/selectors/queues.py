"""Queues page: cluster and local queues, and the workloads waiting with position and reason."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from django.db.models import Count, Sum

from dashboard.selectors import Doc, iso
from scheduling import pod_resources
from scheduling.core.types import (
    MILLI_PER_GPU,
)
from scheduling.models import (
    ClusterQueue,
    GpuAssignment,
    LocalQueue,
    Pod,
    Workload,
)
from scheduling.selectors import cohorts as queue_selectors
from scheduling.selectors import queues as scheduling_selectors
from scheduling.selectors import why_pending

PENDING_SHOWN = 500


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
        result.starts[uid] = {"start": iso(item.estimated_start)}
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
