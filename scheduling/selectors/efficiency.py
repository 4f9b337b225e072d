"""Reads that join allocations (what tenants hold) with telemetry (what their pods really use).

One definition, per tenant and per closed minute m of the window, computed by one function over
the cluster's rows and filtered afterwards: the REST API, the dashboard's tables and charts and
/metrics read the same numbers (docs/dashboard.md has the table):

- held(m): GPUs the tenant's pods held during m, time-weighted: each GPU assignment of a bound
  allocation counts its milli / 1000 for the part of the minute it was bound (a share of a
  time-sliced GPU counts as its fraction). MIG slices are not GPUs and are left out.
- busy(m): GPUs the tenant's pods kept busy during m (DCGM: per pod, the average over the
  minute's readings of the sum of busy over its GPUs; a pod read in only part of the minute's
  readings counts for that part, the minute's readings being the most any pod of the cluster
  got). DCGM cannot split a time-sliced GPU between the pods on it (it repeats the GPU's value
  once per pod), so a shared pod's reading is scaled by its share of the milli held on that GPU
  during the minute. A pod's busy is capped at what it held in the minute, so busy(m) <= held(m).
- peak(m): the same with each pod's peak of the minute, capped at the GPUs it held in it.

Over a window: the measured minutes are those from the first to the last minute the telemetry
ingester rolled up in the window (before that there is nothing to compare with: "collecting
data"); a tenant's minutes are those of them from the minute it was created (or first held a GPU,
if earlier). held = the mean of held(m), busy p95 = the nearest-rank p95 of busy(m), both over
the tenant's minutes, and overRequest = held / busy p95 (scheduling.core.efficiency): undefined
(None, shown "—") when busy p95 is 0 or the tenant has fewer than MIN_MINUTES minutes.

One tenant's numbers read only what they depend on (its holds, every hold on the GPUs it held,
its pods' readings, the minute's reading count), so they equal the cluster's read filtered to it.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from scheduling.core.efficiency import Advice, over_request, right_size, usage_ratio
from scheduling.core.types import MILLI_PER_GPU
from scheduling.models import GpuAssignment, Tenant
from telemetry.selectors import UsagePoint, p95, pod_minutes, rolled_up_minutes

DEFAULT_WINDOW = timedelta(hours=1)
MIN_MINUTES = 5  # fewer measured minutes than this: no overRequest ("—"), too few to judge
ADVICE_MARGIN = 0.2
MINUTE = timedelta(minutes=1)

PodKey = tuple[str, str]  # (namespace, pod name), as DCGM labels a pod


@dataclass(frozen=True)
class TenantEfficiency:
    tenant: str
    requested_gpus: float  # held: mean over the measured minutes
    used_p95_gpus: float | None  # None: no measured minute in the window
    over_request: float | None
    usage_ratio: float
    minutes: int  # measured minutes the numbers are over


@dataclass(frozen=True)
class WorkloadAdvice:
    tenant: str
    workload: str
    pods: int
    advice: Advice

    @property
    def saving_gpus(self) -> float:
        """What the whole workload would give back (per pod saving times pods)."""
        return self.advice.saving_gpus * self.pods


@dataclass(frozen=True)
class _Hold:
    """One GPU (or share of one) held by one pod from `start` to `end` (None: still held)."""

    tenant: str
    pod: PodKey
    workload: str
    gpu: int
    milli: int
    start: datetime
    end: datetime | None
    requested_gpus: float  # what the pod asked for in all


def measured_minutes(start: datetime, end: datetime) -> list[datetime]:
    """The closed minutes of [start, end) the telemetry ingester rolled up: every minute from the
    first to the last rolled-up one (two index reads, whatever the cluster's size)."""
    bounds = rolled_up_minutes(start, end)
    if bounds is None:
        return []
    first, last = bounds
    count = int((last - first) / MINUTE) + 1
    return [first + i * MINUTE for i in range(count)]


def _holds(start: datetime, end: datetime, tenant: str | None) -> list[_Hold]:
    """The GPU holds overlapping [start, end): every one, or for one tenant those on the GPUs its
    pods held (its neighbours on a shared GPU set its pods' shares)."""
    rows = (
        GpuAssignment.objects.filter(
            mig_slot__isnull=True,
            allocation__bound_at__isnull=False,
            allocation__bound_at__lt=end,
        )
        .filter(Q(allocation__released_at__isnull=True) | Q(allocation__released_at__gt=start))
        .order_by("id")
    )
    if tenant is not None:
        its_gpus = rows.filter(allocation__pod__workload__tenant__name=tenant).values("gpu_id")
        rows = rows.filter(gpu_id__in=its_gpus)
    holds = []
    for values in rows.values_list(
        "allocation__pod__workload__tenant__name",
        "allocation__pod__workload__tenant__namespace",
        "allocation__pod__name",
        "allocation__pod__workload__name",
        "gpu_id",
        "milli",
        "allocation__bound_at",
        "allocation__released_at",
        "allocation__pod__gpus",
        "allocation__pod__gpu_milli",
    ):
        name, namespace, pod, workload, gpu, milli, bound, released, gpus, share = values
        if bound is None:  # excluded by the query; keeps the type checker informed
            continue
        holds.append(
            _Hold(
                name,
                (namespace, pod),
                workload,
                gpu,
                milli,
                bound,
                released,
                gpus + share / MILLI_PER_GPU,
            )
        )
    return holds


def _overlap(hold: _Hold, minute: datetime) -> float:
    """The fraction of `minute` during which `hold` was held."""
    begin = max(hold.start, minute)
    finish = min(hold.end or minute + MINUTE, minute + MINUTE)
    return max((finish - begin) / MINUTE, 0.0)


def _minutes_of(hold: _Hold, minutes: list[datetime]) -> Iterable[tuple[datetime, float]]:
    """The minutes `hold` overlaps (the measured minutes are consecutive: index arithmetic)."""
    first = max(0, int((hold.start - minutes[0]) // MINUTE))
    last = len(minutes) - 1 if hold.end is None else int((hold.end - minutes[0]) // MINUTE)
    for minute in minutes[first : min(last, len(minutes) - 1) + 1]:
        part = _overlap(hold, minute)
        if part > 0:
            yield minute, part


@dataclass
class _Ledger:
    """Per minute: each tenant's GPUs held, and each pod's share of the DCGM reading it sees."""

    held: dict[str, dict[datetime, float]]
    factor: dict[tuple[PodKey, datetime], float]
    pods: dict[PodKey, _Hold]  # one hold of each pod: its tenant, workload and request
    pod_held: dict[tuple[PodKey, datetime], float]  # GPUs the pod held, time-weighted
    pod_peak: dict[tuple[PodKey, datetime], float]  # GPUs the pod held at any time of the minute
    first_held: dict[str, datetime]  # each tenant's first hold in the window


def _ledger(minutes: list[datetime], tenant: str | None) -> _Ledger:
    ledger = _Ledger(
        defaultdict(lambda: defaultdict(float)), {}, {}, defaultdict(float), defaultdict(float), {}
    )
    if not minutes:
        return ledger
    holds = _holds(minutes[0], minutes[-1] + MINUTE, tenant)
    on_gpu: dict[tuple[int, datetime], float] = defaultdict(float)  # milli-minutes per GPU
    mine: dict[tuple[PodKey, int, datetime], float] = defaultdict(float)
    for hold in holds:
        if tenant is not None and hold.tenant != tenant:
            # A neighbour on one of the tenant's GPUs: it sets the shares, it is not reported.
            for minute, part in _minutes_of(hold, minutes):
                on_gpu[(hold.gpu, minute)] += hold.milli * part
            continue
        ledger.pods.setdefault(hold.pod, hold)
        first = ledger.first_held.get(hold.tenant)
        ledger.first_held[hold.tenant] = hold.start if first is None else min(first, hold.start)
        for minute, part in _minutes_of(hold, minutes):
            ledger.held[hold.tenant][minute] += hold.milli / MILLI_PER_GPU * part
            ledger.pod_held[(hold.pod, minute)] += hold.milli / MILLI_PER_GPU * part
            ledger.pod_peak[(hold.pod, minute)] += hold.milli / MILLI_PER_GPU
            on_gpu[(hold.gpu, minute)] += hold.milli * part
            mine[(hold.pod, hold.gpu, minute)] += hold.milli * part
    # A pod alone on its GPU (whole or a share with no neighbour) owns the reading: factor 1.
    shares: dict[tuple[PodKey, datetime], list[float]] = defaultdict(list)
    for (pod, gpu, minute), milli in mine.items():
        shares[(pod, minute)].append(milli / max(on_gpu[(gpu, minute)], 1e-9))
    for key, parts in shares.items():
        ledger.factor[key] = sum(parts) / len(parts)
    return ledger


@dataclass(frozen=True)
class _Reading:
    pod: PodKey
    minute: datetime
    used_avg: float
    used_max: float
    used_p95: float
    fb_used: float


def _readings(minutes: list[datetime], ledger: _Ledger) -> list[_Reading]:
    """Each measured pod-minute of a pod that held GPUs then, scaled by its share."""
    if not minutes:
        return []
    # A pod that ran for part of a minute was read fewer times than the minute had readings: its
    # average over its own readings is weighted by its share of them, as held(m) is by time.
    # The minute's reading count is the most any pod got (one that ran the whole minute).
    scrapes, rows = pod_minutes(
        first=minutes[0], last=minutes[-1], namespaces={pod[0] for pod in ledger.pods}
    )
    readings = []
    for namespace, pod, minute, samples, avg, peak, high, fb in rows:
        key = ((namespace, pod), minute)
        factor = ledger.factor.get(key)
        if factor is None:  # MIG slices, a pod that held no GPU that minute, or a neighbour's
            continue
        seen = samples / max(scrapes.get(minute, samples), samples, 1)
        held, most = ledger.pod_held[key], ledger.pod_peak[key]
        readings.append(
            _Reading(
                (namespace, pod),
                minute,
                min(avg * factor * seen, held),
                min(peak * factor, most),
                min(high * factor, most),
                fb,
            )
        )
    return readings


@dataclass
class UsageWindow:
    """The measured minutes of a window, who held what in each, and the scaled pod readings:
    read once, then summed per tenant (tenant_minutes) or per workload (workload_advice)."""

    minutes: list[datetime]
    ledger: _Ledger
    readings: list[_Reading]
    created: dict[str, datetime]  # when each tenant reported was created

    def minutes_of_tenant(self, tenant: str) -> list[datetime]:
        """The measured minutes the tenant existed in: from the minute it was created, or first
        held a GPU if that was earlier (a tenant holding GPUs existed)."""
        starts = [self.created.get(tenant), self.ledger.first_held.get(tenant)]
        known = [s for s in starts if s is not None]
        if not known:
            return self.minutes
        since = min(known).replace(second=0, microsecond=0)
        return [minute for minute in self.minutes if minute >= since]


def usage_window(*, start: datetime, end: datetime, tenant: str | None = None) -> UsageWindow:
    """The window read for every tenant, or only what one tenant's numbers depend on (equal to
    the every-tenant read filtered to it)."""
    minutes = measured_minutes(start, end)
    ledger = _ledger(minutes, tenant)
    tenants = Tenant.objects.all() if tenant is None else Tenant.objects.filter(name=tenant)
    created = dict(tenants.values_list("name", "created_at"))
    return UsageWindow(minutes, ledger, _readings(minutes, ledger), created)


def tenant_minutes(
    *, start: datetime, end: datetime, tenant: str | None = None
) -> dict[str, list[UsagePoint]]:
    """Per tenant (or the one named), held / busy / peak per measured minute of [start, end);
    `requested` is the window's held (the mean)."""
    return minutes_of(usage_window(start=start, end=end, tenant=tenant))


def minutes_of(window: UsageWindow) -> dict[str, list[UsagePoint]]:
    """tenant_minutes() of a window already read."""
    ledger = window.ledger
    busy: dict[str, dict[datetime, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0.0, 0.0, 0.0])
    )
    for reading in window.readings:
        point = busy[ledger.pods[reading.pod].tenant][reading.minute]
        point[0] += reading.used_avg
        point[1] += reading.used_max
        point[2] += reading.fb_used
    result: dict[str, list[UsagePoint]] = {}
    for name in sorted(set(ledger.held) | set(busy)):
        held = ledger.held.get(name, {})
        minutes = window.minutes_of_tenant(name)
        mean = sum(held.values()) / max(len(minutes), 1)
        result[name] = [
            UsagePoint(
                minute=minute,
                used_avg=round(busy[name][minute][0], 4),
                used_max=round(busy[name][minute][1], 4),
                gpus=round(held.get(minute, 0.0), 4),
                fb_used_mib=round(busy[name][minute][2], 1),
                requested=round(mean, 4),
            )
            for minute in minutes
        ]
    return result


def efficiency_of(points: list[UsagePoint], tenant: str) -> TenantEfficiency:
    """The window's numbers from a tenant's minutes (tenant_minutes)."""
    if not points:
        return TenantEfficiency(tenant, 0.0, None, None, 1.0, 0)
    held = sum(p.gpus for p in points) / len(points)
    used = p95([p.used_avg for p in points]) or 0.0
    return TenantEfficiency(
        tenant=tenant,
        requested_gpus=round(held, 4),
        used_p95_gpus=round(used, 4),
        over_request=over_request(held, used) if len(points) >= MIN_MINUTES else None,
        usage_ratio=usage_ratio(held, used),
        minutes=len(points),
    )


def tenant_efficiency(
    *, window: timedelta = DEFAULT_WINDOW, now: datetime | None = None
) -> dict[str, TenantEfficiency]:
    """Every tenant's held vs busy GPUs over `window` and what follows from it."""
    now = now or timezone.now()
    series = tenant_minutes(start=now - window, end=now)
    names = set(Tenant.objects.values_list("name", flat=True))
    return {name: efficiency_of(series.get(name, []), name) for name in sorted(names)}


def usage_ratios(*, now: datetime | None = None) -> dict[str, float]:
    """Each tenant's p95 busy / held GPUs over the default window (1 when unknown)."""
    return {name: e.usage_ratio for name, e in tenant_efficiency(now=now).items()}


_recent_lock = threading.Lock()
_recent: tuple[float, dict[str, TenantEfficiency]] | None = None  # (monotonic time read, numbers)


def recent_tenant_efficiency() -> dict[str, TenantEfficiency]:
    """tenant_efficiency() as read at most USAGE_RATIOS_MAX_AGE_S ago (default 10 s) in this
    process: the queue status (the Queues view, the API) and /metrics read it per request, and the
    window reads every GPU assignment of the hour (1-2 s with telemetry); an hour of closed
    minutes seen a few seconds late differs from it by nothing a reader could act on. The
    scheduler keeps its own (load_feed.LoadFeed.usage_ratios)."""
    global _recent
    max_age = float(getattr(settings, "USAGE_RATIOS_MAX_AGE_S", 10.0))
    with _recent_lock:
        if _recent is not None and time.monotonic() - _recent[0] < max_age:
            return dict(_recent[1])
    numbers = tenant_efficiency()  # outside the lock: a slow read holds no other reader back
    with _recent_lock:
        _recent = (time.monotonic(), numbers)
    return dict(numbers)


def recent_usage_ratios() -> dict[str, float]:
    """usage_ratios() of recent_tenant_efficiency()."""
    return {name: e.usage_ratio for name, e in recent_tenant_efficiency().items()}


def workload_advice(
    *, window: timedelta = DEFAULT_WINDOW, now: datetime | None = None, tenant: str | None = None
) -> list[WorkloadAdvice]:
    """Per workload with measured pods: what each pod should request (the p95 of its per-minute
    busy, scaled like the tenant's, plus a margin); the largest total saving first."""
    now = now or timezone.now()
    return advice_of(usage_window(start=now - window, end=now, tenant=tenant))


def advice_of(window: UsageWindow) -> list[WorkloadAdvice]:
    """workload_advice() of a window already read."""
    ledger = window.ledger
    per_pod: dict[PodKey, list[float]] = defaultdict(list)
    for reading in window.readings:
        per_pod[reading.pod].append(reading.used_p95)
    grouped: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for pod, values in per_pod.items():
        hold = ledger.pods[pod]
        grouped[(hold.tenant, hold.workload)].append((hold.requested_gpus, p95(values) or 0.0))
    advice = [
        WorkloadAdvice(
            tenant=tenant_name,
            workload=workload,
            pods=len(rows),
            advice=right_size(
                max(r for r, _ in rows), max(u for _, u in rows), margin=ADVICE_MARGIN
            ),
        )
        for (tenant_name, workload), rows in grouped.items()
    ]
    advice.sort(key=lambda a: (-a.saving_gpus, a.tenant, a.workload))
    return advice


def held_now_gpus() -> dict[str, float]:
    """GPUs each tenant holds right now (active whole and shared assignments), by the same rule
    as held(m): milli / 1000, MIG slices left out."""
    rows = (
        GpuAssignment.objects.filter(active=True, mig_slot__isnull=True)
        .values_list("allocation__pod__workload__tenant__name")
        .annotate(milli=Sum("milli"))
        .order_by()
    )
    return {name: round((milli or 0) / MILLI_PER_GPU, 2) for name, milli in rows}
