"""Telemetry reads (HackSoft selectors): the scheduler's GPU view, node freshness, usage series.

Telemetry is keyed by names; joins to nodes, allocations and tenants happen here, by name:
node name + GPU index for the scheduler, pod namespace for tenants (a tenant owns namespaces).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from django.conf import settings
from django.db.models import Max, Min, Sum
from django.utils import timezone
from django.utils.module_loading import import_string

from telemetry import conf
from telemetry.holders import PodName
from telemetry.models import GpuLatest, GpuMinute, NodeTelemetry, PodMinute, SourceStatus


@dataclass(frozen=True)
class MigLoad:
    instance: str
    profile: str
    busy: float | None
    fb_used_mib: float | None


@dataclass(frozen=True)
class GpuLoad:
    """What the scheduler needs of one GPU: how busy it really is, and how old that news is."""

    node: str
    gpu_index: int
    uuid: str
    busy: float | None  # 0-1 (PROF_GR_ENGINE_ACTIVE, else GPU_UTIL/100); MIG: mean of instances
    fb_used_mib: float | None  # MIG: sum of instances
    fb_free_mib: float | None
    sampled_at: datetime
    age_seconds: float
    stale: bool  # older than the freshness window: LoadAware scores neutral
    mig: tuple[MigLoad, ...] = ()


class _LatestRow(NamedTuple):
    node: str
    gpu_index: int
    mig_instance: str
    mig_profile: str
    uuid: str
    busy: float | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    sampled_at: datetime


def gpu_loads(
    *, now: datetime | None = None, freshness: timedelta | None = None, nodes: Iterable[str] = ()
) -> dict[tuple[str, int], GpuLoad]:
    """Each GPU's latest values with their age, keyed by (node name, GPU index).

    MIG instances of one GPU are folded into their GPU's entry (and listed in `mig`).
    `nodes` limits the result to those nodes (all nodes when empty).
    """
    now = now or timezone.now()
    window = (freshness or conf.freshness()).total_seconds()
    rows = GpuLatest.objects.order_by("node", "gpu_index", "mig_instance")
    names = list(nodes)
    if names:
        rows = rows.filter(node__in=names)
    by_gpu: dict[tuple[str, int], list[_LatestRow]] = defaultdict(list)
    for values in rows.values_list(*_LatestRow._fields):
        row = _LatestRow(*values)
        by_gpu[(row.node, row.gpu_index)].append(row)
    return {key: _gpu_load(parts, now, window) for key, parts in by_gpu.items()}


def _gpu_load(parts: list[_LatestRow], now: datetime, window: float) -> GpuLoad:
    first = parts[0]
    sampled_at = min(part.sampled_at for part in parts)  # the oldest part sets the age
    age = max((now - sampled_at).total_seconds(), 0.0)
    instances = [part for part in parts if part.mig_instance]
    if not instances:
        busy, fb_used, fb_free = first.busy, first.fb_used_mib, first.fb_free_mib
        mig: tuple[MigLoad, ...] = ()
    else:
        mig = tuple(
            MigLoad(part.mig_instance, part.mig_profile, part.busy, part.fb_used_mib)
            for part in instances
        )
        busy = _mean([part.busy for part in instances])
        fb_used = _sum([part.fb_used_mib for part in instances])
        fb_free = _sum([part.fb_free_mib for part in instances])
    return GpuLoad(
        node=first.node,
        gpu_index=first.gpu_index,
        uuid=first.uuid,
        busy=busy,
        fb_used_mib=fb_used,
        fb_free_mib=fb_free,
        sampled_at=sampled_at,
        age_seconds=age,
        stale=age > window,
        mig=mig,
    )


def _mean(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) / len(present) if present else None


def _sum(values: Iterable[float | None]) -> float | None:
    present = [value for value in values if value is not None]
    return sum(present) if present else None


@dataclass(frozen=True)
class NodeFreshness:
    node: str
    state: str  # "fresh" | "stale" | "missing"
    last_sample_at: datetime | None
    age_seconds: float | None
    gpus: int


def node_freshness(
    *, now: datetime | None = None, nodes: Iterable[str] = ()
) -> dict[str, NodeFreshness]:
    """Freshness of every node that reports, plus "missing" for each of `nodes` that never did.

    The state is computed from the age (the stored state lags by at most one ingest cycle).
    """
    now = now or timezone.now()
    window = conf.freshness()
    result: dict[str, NodeFreshness] = {}
    for row in NodeTelemetry.objects.order_by("node"):
        age = now - row.last_sample_at
        state = NodeTelemetry.State.STALE if age > window else NodeTelemetry.State.FRESH
        result[row.node] = NodeFreshness(
            row.node, str(state), row.last_sample_at, max(age.total_seconds(), 0.0), row.gpus
        )
    for node in nodes:
        if node not in result:
            result[node] = NodeFreshness(node, str(NodeTelemetry.State.MISSING), None, None, 0)
    return result


def cluster_nodes() -> frozenset[str] | None:
    """The nodes gpusched manages, from the provider TELEMETRY_CLUSTER_NODES names (the project
    names scheduling's node list: telemetry is a leaf): telemetry is placed on no other
    (telemetry.placement). None while none is registered, or with no provider (telemetry alone: a
    source is placed as its labels say)."""
    path = getattr(settings, "TELEMETRY_CLUSTER_NODES", "")
    names: frozenset[str] = import_string(path)() if path else frozenset()
    return names or None


def freshness() -> timedelta:
    """How old a GPU reading may be and still count (TELEMETRY_FRESHNESS_SECONDS)."""
    return conf.freshness()


def observed_on_node(node: str) -> dict[PodName, tuple[int, ...]]:
    """The whole GPUs each pod holds on `node`, from the latest stored labels (the Node page; the
    ingester reads the same from each batch: telemetry.holders.observed_from_samples)."""
    found: dict[PodName, set[int]] = defaultdict(set)
    rows = GpuLatest.objects.filter(node=node, mig_instance="").values_list("gpu_index", "pods")
    for index, pods in rows:
        for namespace, pod, *_ in pods or []:
            found[(node, namespace, pod)].add(index)
    return {name: tuple(sorted(gpus)) for name, gpus in found.items()}


def source_statuses() -> list[SourceStatus]:
    return list(SourceStatus.objects.order_by("name"))


# --- usage: pods, namespaces, tenants --------------------------------------------------------


def p95(values: Sequence[float]) -> float | None:
    """Nearest-rank 95th percentile: the smallest value with at least 95% of values at or below."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(math.ceil(0.95 * len(ordered)) - 1, 0)]


def pod_used_p95(
    *, window: timedelta, now: datetime | None = None, namespace: str | None = None
) -> dict[tuple[str, str], float]:
    """p95 of the GPUs each pod kept busy over `window`, keyed by (namespace, pod).

    Computed over the pods' per-minute p95 values: a slight over-estimate of the p95 over every
    reading, which errs on the side of not reclaiming what a pod may need.
    """
    now = now or timezone.now()
    rows = PodMinute.objects.filter(minute__gte=now - window, minute__lte=now)
    if namespace is not None:
        rows = rows.filter(namespace=namespace)
    values: dict[tuple[str, str], list[float]] = defaultdict(list)
    for ns, pod, used in rows.values_list("namespace", "pod", "used_p95"):
        values[(ns, pod)].append(used)
    return {key: p95(series) or 0.0 for key, series in values.items()}


def namespace_used_p95(*, window: timedelta, now: datetime | None = None) -> dict[str, float]:
    """p95 over `window` of the GPUs each namespace kept busy (its pods' per-minute sums)."""
    now = now or timezone.now()
    per_minute = (
        PodMinute.objects.filter(minute__gte=now - window, minute__lte=now)
        .values("namespace", "minute")
        .annotate(used=Sum("used_p95"))
    )
    values: dict[str, list[float]] = defaultdict(list)
    for row in per_minute:
        values[row["namespace"]].append(row["used"])
    return {ns: p95(series) or 0.0 for ns, series in values.items()}


def tenant_used_p95(
    *, window: timedelta, tenants: Mapping[str, str], now: datetime | None = None
) -> dict[str, float]:
    """namespace_used_p95() summed per tenant; `tenants` maps namespace -> tenant name."""
    result: dict[str, float] = defaultdict(float)
    for ns, used in namespace_used_p95(window=window, now=now).items():
        tenant = tenants.get(ns)
        if tenant is not None:
            result[tenant] += used
    return dict(result)


def rolled_up_minutes(start: datetime, end: datetime) -> tuple[datetime, datetime] | None:
    """The first and the last closed minute of [start, end) the ingester rolled up (two index
    reads, whatever the cluster's size), or None."""
    bounds = GpuMinute.objects.filter(minute__gte=start, minute__lt=end).aggregate(
        first=Min("minute"), last=Max("minute")
    )
    first, last = bounds["first"], bounds["last"]
    if first is None or last is None:
        return None
    return first, last


class PodMinuteReading(NamedTuple):
    namespace: str
    pod: str
    minute: datetime
    samples: int
    used_avg: float
    used_max: float
    used_p95: float
    fb_used_avg: float


def pod_minutes(
    *, first: datetime, last: datetime, namespaces: Iterable[str]
) -> tuple[dict[datetime, int], list[PodMinuteReading]]:
    """The pods' rolled-up minutes from `first` to `last` in `namespaces`, and per minute the most
    readings any pod of the cluster got (one that ran the whole minute): a figure of the minute,
    the same whichever namespaces are asked for (one aggregate in SQL)."""
    window = PodMinute.objects.filter(minute__gte=first, minute__lte=last)
    scrapes = dict(window.values_list("minute").annotate(n=Max("samples")).order_by())
    rows = window.filter(namespace__in=sorted(namespaces))
    readings = [
        PodMinuteReading(*values)
        for values in rows.values_list(
            "namespace",
            "pod",
            "minute",
            "samples",
            "used_avg",
            "used_max",
            "used_p95",
            "fb_used_avg",
        )
    ]
    return scrapes, readings


@dataclass(frozen=True)
class UsagePoint:
    """One minute of a tenant's usage, as scheduling.selectors.efficiency defines it."""

    minute: datetime
    used_avg: float  # GPUs kept busy, averaged over the minute
    used_max: float
    gpus: float  # GPUs held, time-weighted over the minute
    fb_used_mib: float
    requested: float | None  # the window's mean GPUs held


def gpu_busy_p95(*, window: timedelta, now: datetime | None = None) -> dict[tuple[str, int], float]:
    """p95 over `window` of how busy each whole or shared GPU was (MIG GPUs are left out), keyed
    by (node, GPU index): the per-minute p95 values of the rollups, and the latest fresh sample
    so a return of load shows before its minute is rolled up."""
    now = now or timezone.now()
    values: dict[tuple[str, int], list[float]] = defaultdict(list)
    minutes = GpuMinute.objects.filter(
        minute__gte=now - window, minute__lte=now, mig_instance="", busy_p95__isnull=False
    ).values_list("node", "gpu_index", "busy_p95")
    for node, index, busy in minutes:
        if busy is not None:
            values[(node, index)].append(busy)
    for key, load in gpu_loads(now=now).items():
        if load.busy is not None and not load.stale and not load.mig:
            values[key].append(load.busy)
    return {key: p95(series) or 0.0 for key, series in values.items()}
