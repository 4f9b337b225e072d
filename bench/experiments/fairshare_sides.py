"""The fair-share experiment (bench/experiments/fairshare.py) through the product's shell, on
either cluster side: the same Philly jobs and the same queues, but submitted through the services
as tenants would, admitted and placed by the one scheduling cycle (`runscheduler`'s or
`runkube`'s), started and finished by the embedded simulator or by the simulated Kubernetes'
kubelets. The queues are Kueue's objects: applied as `applyqueues` does on the database side,
created in the cluster through the official client on the Kubernetes side (where the side reads
them from).

Time runs on a grid of `step_s` (an empty cluster skips ahead to the next arrival). After each
step's cycles the state is sampled from the database (every pod's phase): what is sampled holds
until the next step, and the measures are fairshare's own (PolicyResult, same keys): a job has
started when all its pods are placed, and waits until the last time that happened.
"""

from __future__ import annotations

import math
import statistics
import time
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from bench.experiments import worlds
from bench.experiments.fairshare import (
    GPU_MODEL,
    POLICIES,
    PolicyResult,
    Progress,
    Trace,
    jain,
    percentile,
    queue_documents,
    water_fill,
)
from bench.experiments.worlds import SimClock
from scheduling import services
from scheduling.cache import ClusterCache
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import Resources, TopologyPolicy
from scheduling.models import Event, Pod
from scheduling.reclaim import ReclaimFeed
from sim.arrivals import Arrival
from sim.cluster import PRESETS, build_nodes
from sim.spec import ClusterSpec, ShapeSpec
from sim.utilization import UtilizationProfile

PLACED = frozenset({Pod.Phase.BOUND, Pod.Phase.RUNNING})
HOLDING = PLACED | {Pod.Phase.TERMINATING}  # a terminating pod still holds its GPUs


class TraceArrivals:
    """The trace's jobs as the simulator's arrivals (sim/arrivals.py), in arrival order: jobs
    larger than one server are gangs of equal pods, as in fairshare."""

    def __init__(self, trace: Trace) -> None:
        self.jobs = sorted(trace.jobs, key=lambda j: (j.arrival_s, j.key))
        self.position = 0

    @property
    def next_at(self) -> float:
        return self.jobs[self.position].arrival_s if self.position < len(self.jobs) else math.inf

    def due(self, until_s: float) -> list[Arrival]:
        out = []
        while self.position < len(self.jobs) and self.jobs[self.position].arrival_s <= until_s:
            job = self.jobs[self.position]
            self.position += 1
            shape = ShapeSpec(
                pods=job.pods,
                resources=Resources(
                    cpu_milli=4000 * job.per_pod, memory_mib=32_768 * job.per_pod, gpus=job.per_pod
                ),
                topology_policy=(
                    TopologyPolicy.BEST_EFFORT if job.per_pod > 1 else TopologyPolicy.NONE
                ),
            )
            out.append(
                Arrival(
                    at_s=job.arrival_s,
                    tenant=job.tenant,
                    name=job.key,
                    shape=shape,
                    duration_s=job.duration_s,
                    utilization=UtilizationProfile(mean=job.utilization, seed=self.position),
                )
            )
        return out


@dataclass
class FairnessMeter:
    """fairshare's time integrals: allocation, utilization, and each tenant's allocation over its
    weighted max-min fair share while the cluster is contended."""

    shares: dict[str, float]
    usage: dict[str, float]  # tenant -> the utilization of its jobs
    capacity: int
    window_end_s: float
    last_s: float = 0.0
    allocated: float = 0.0
    used: float = 0.0
    measured_s: float = 0.0
    ratio_integral: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    ratio_time: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def advance(
        self, until_s: float, running: Mapping[str, int], waiting: Mapping[str, int]
    ) -> None:
        """`running` and `waiting` GPUs per tenant held from the last call until `until_s`."""
        span = min(until_s, self.window_end_s) - max(self.last_s, 0.0)
        if span > 0:
            self.allocated += span * sum(running.values())
            self.used += span * sum(n * self.usage.get(t, 0.0) for t, n in running.items())
            self.measured_s += span
            demand = {t: float(running.get(t, 0) + waiting.get(t, 0)) for t in self.shares}
            if sum(demand.values()) > self.capacity:
                fair = water_fill(float(self.capacity), demand, self.shares)
                for tenant in self.shares:
                    if fair[tenant] >= 0.5:
                        self.ratio_integral[tenant] += span * running.get(tenant, 0) / fair[tenant]
                        self.ratio_time[tenant] += span
        self.last_s = until_s

    def ratio(self, tenant: str) -> float:
        time_s = self.ratio_time[tenant]
        return self.ratio_integral[tenant] / time_s if time_s else 1.0

    def share(self, integral: float) -> float:
        return integral / (self.capacity * self.measured_s) if self.measured_s else 0.0


@dataclass
class _Sample:
    running: dict[str, int]
    waiting: dict[str, int]
    placed: dict[str, int]  # job -> pods placed
    active: int  # pods not finished


def _sample() -> _Sample:
    sample = _Sample(defaultdict(int), defaultdict(int), defaultdict(int), 0)
    rows = Pod.objects.filter(phase__in=Pod.ACTIVE_PHASES).values_list(
        "workload__name", "workload__tenant__name", "phase", "gpus"
    )
    for job, tenant, phase, gpus in rows:
        sample.active += 1
        if phase in HOLDING:
            sample.running[tenant] += gpus
        else:
            sample.waiting[tenant] += gpus
        if phase in PLACED:
            sample.placed[job] += 1
    return sample


def simulate(
    trace: Trace,
    policy: str,
    framework: Framework,
    *,
    side: str,
    nodes: int,
    step_s: float = 300.0,
    drain_days: float = 1.0,
    progress: Progress | None = None,
) -> PolicyResult:
    """One policy through the shell on an empty database (the caller provides a scratch one)."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r} (known: {', '.join(POLICIES)})")
    started_wall = time.perf_counter()
    pool = replace(
        PRESETS["pcie-8gpu-2socket"], count=nodes, gpu_model=GPU_MODEL, gpu_memory_mib=16_280
    )
    spec = ClusterSpec(pools=(pool,))
    capacity = int(ClusterSnapshot(build_nodes([pool])).gpu_count.sum())
    tenants = sorted({j.tenant for j in trace.jobs} | set(trace.shares))
    shares = {t: trace.shares.get(t, 0.0) for t in tenants}
    jobs = {j.key: j for j in trace.jobs}
    window_end = trace.days * 86400.0
    horizon = window_end + drain_days * 86400.0
    meter = FairnessMeter(
        shares, {j.tenant: j.utilization for j in trace.jobs}, capacity, window_end
    )

    clock = SimClock(trace.start)
    arrivals = TraceArrivals(trace)
    cluster = worlds.world(side, spec, clock, arrivals)
    started_at: dict[str, float] = {}
    placed_now: set[str] = set()
    partial: set[str] = set()
    try:
        for tenant in tenants:  # as `createtenant` does; each tenant's namespace is its name
            services.tenant_create(name=tenant)
        cluster.apply_queues(queue_documents(policy, shares, capacity))
        scheduler = cluster.cycle(
            framework,
            clock=clock,
            lease_duration_s=10 * horizon,
            cache=ClusterCache(monotonic=clock.monotonic),
            reclaim_feed=ReclaimFeed(monotonic=clock.monotonic, enabled=False),
        )
        sample = _Sample({}, {}, {}, 0)
        t = 0.0
        while t <= horizon and (sample.active or arrivals.next_at < math.inf):
            step = step_s
            if not sample.active:  # nothing to run or place: on to the next arrival
                step = max(step_s, math.ceil((arrivals.next_at - t) / step_s) * step_s)
            t += step
            meter.advance(t, sample.running, sample.waiting)
            clock.advance(step)
            cluster.step()  # arrivals, ends
            while scheduler.run_once().more:
                pass
            cluster.step()  # what was bound starts now
            sample = _sample()
            for key, count in sample.placed.items():
                job = jobs[key]
                if count == job.pods and key not in placed_now:
                    started_at[key] = t
                elif 0 < count < job.pods:
                    partial.add(key)
            placed_now = {k for k, n in sample.placed.items() if n == jobs[k].pods}
            if progress is not None:
                progress(policy, min(1.0, t / window_end))
        end = max(t, window_end)
        meter.advance(end, sample.running, sample.waiting)
        preemptions = Event.objects.filter(type="workload.evicted").count()
    finally:
        cluster.close()

    waits: dict[str, list[float]] = defaultdict(list)
    for key, job in jobs.items():
        waits[job.tenant].append(started_at.get(key, end) - job.arrival_s)
    per_tenant: dict[str, dict[str, Any]] = {
        tenant: {
            "jobs": len(w),
            "share": round(shares[tenant], 4),
            "wait_p50_s": round(percentile(w, 0.5), 1),
            "wait_p95_s": round(percentile(w, 0.95), 1),
            "wait_mean_s": round(statistics.fmean(w), 1),
            "fair_share_ratio": round(meter.ratio(tenant), 4),
        }
        for tenant, w in sorted(waits.items())
    }
    return PolicyResult(
        policy=policy,
        jain=jain([meter.ratio(t) for t in tenants if meter.ratio_time[t] > 0]),
        worst_tenant_wait_p95_s=max((percentile(w, 0.95) for w in waits.values()), default=0.0),
        gpu_allocation=meter.share(meter.allocated),
        gpu_utilization=meter.share(meter.used),
        gangs_started=sum(1 for k in started_at if jobs[k].pods > 1),
        gangs_partially_started=len(partial),
        jobs=len(jobs),
        jobs_started=len(started_at),
        preemptions=preemptions,
        tenants=per_tenant,
        simulated_s=t,
        wall_s=time.perf_counter() - started_wall,
    )
