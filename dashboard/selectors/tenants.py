"""Tenants page: who holds what now, and held vs busy GPUs over the last hour."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Count
from django.utils import timezone

from dashboard.selectors import Doc
from scheduling.models import (
    GpuAssignment,
    Pod,
    Tenant,
    Workload,
)
from scheduling.selectors.efficiency import (
    advice_of,
    efficiency_of,
    held_now_gpus,
    minutes_of,
    usage_window,
)
from scheduling.selectors.quota import ClusterQueueQuota, cluster_quota

State = dict[str, dict[str, Doc]]


SERIES_WINDOW = timedelta(hours=1)
ADVICE_SHOWN = 50  # the largest savings; the page shows them ten at a time


def tenants() -> dict[str, Doc]:
    """Per tenant, now: active workloads, pods waiting and placed, GPUs held (whole and shares,
    in GPUs, by the rule of scheduling.selectors.efficiency's held) and MIG slices held."""
    quota = gpu_quota_by_namespace()
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
    for name, slots in (
        GpuAssignment.objects.filter(active=True, mig_slot__isnull=False)
        .values_list("allocation__pod__workload__tenant__name")
        .annotate(slots=Count("id"))
        .order_by()
    ):
        result[name]["mig"] = slots
    for name, gpus in held_now_gpus().items():
        result[name]["gpus"] = gpus
    return result


def gpu_quota_by_namespace() -> dict[str, Doc]:
    """Per namespace: the nominal GPU quota of the cluster queues its local queues feed (the
    figure the REST API's /quota sums as `hard`, from the same read: scheduling.selectors.quota),
    and the other namespaces sharing those queues (a cluster queue's quota is shared by its
    tenants)."""
    feeds: dict[str, list[ClusterQueueQuota]] = defaultdict(list)
    for cq in cluster_quota().values():
        for namespace in cq.namespaces:
            feeds[namespace].append(cq)
    return {
        namespace: {
            "gpus": round(sum(cq.nominal_gpus() for cq in queues), 3),
            "cluster_queues": [cq.name for cq in queues],
            "shared_with": sorted(set().union(*(cq.namespaces for cq in queues)) - {namespace}),
        }
        for namespace, queues in feeds.items()
    }


def usage(now: datetime | None = None) -> State:
    """The last hour, by the one definition of scheduling.selectors.efficiency: per tenant its
    minutes (held, busy, peak: the charts) and the window's held, busy p95 and overRequest (the
    table, computed from the very same minutes); the biggest right-sizing savings (ADVICE_SHOWN of
    them, largest first); and which minutes were measured."""
    now = now or timezone.now()
    window = usage_window(start=now - SERIES_WINDOW, end=now)
    minutes = minutes_of(window)
    series: dict[str, Doc] = {}
    numbers: dict[str, Doc] = {}
    for tenant, points in minutes.items():
        series[tenant] = {
            "t": [int(p.minute.timestamp()) for p in points],
            "held": [round(p.gpus, 2) for p in points],
            "busy": [round(p.used_avg, 2) for p in points],
            "peak": [round(p.used_max, 2) for p in points],
        }
        e = efficiency_of(points, tenant)
        if e.requested_gpus > 0 or (e.used_p95_gpus or 0) > 0:
            numbers[tenant] = {
                "tenant": tenant,
                "held": round(e.requested_gpus, 2),
                "busy_p95": None if e.used_p95_gpus is None else round(e.used_p95_gpus, 2),
                "over_request": None if e.over_request is None else round(e.over_request, 2),
                "minutes": e.minutes,
            }
    measured = window.minutes
    advice = [a for a in advice_of(window) if a.advice.saving_gpus > 0]
    return {
        "series": series,
        "efficiency": numbers,
        "advice": {
            f"{rank:03d}": {
                "rank": rank,
                "tenant": a.tenant,
                "workload": a.workload,
                "pods": a.pods,
                "asks": round(a.advice.requested_gpus, 2),
                "busy_p95": round(a.advice.used_p95_gpus, 2),
                "instead": a.advice.resource,
                "saves": round(a.advice.saving_gpus, 2),
                "saves_total": round(a.saving_gpus, 2),
            }
            for rank, a in enumerate(advice[:ADVICE_SHOWN])
        },
        "window": {
            "all": {
                "minutes": len(measured),
                "first": int(measured[0].timestamp()) if measured else None,
                "last": int(measured[-1].timestamp()) if measured else None,
                "advised": len(advice),
            }
        },
    }
