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
import time
from collections import defaultdict
from dataclasses import dataclass, replace

from bench.experiments import worlds
from bench.experiments.eta import Started, eta_accuracy
from bench.experiments.fairness import FairnessMeter, jain, percentile
from bench.experiments.fairshare import BIG_GANG_GPUS, GPU_MODEL, PolicyResult, Progress
from bench.experiments.philly import POLICIES, Trace, queue_documents
from bench.experiments.worlds import SimClock
from scheduling import services
from scheduling.core.queueing.backfill import DEFAULT_STARVING_AFTER_S
from scheduling.core.queueing.consolidation import REASON as CONSOLIDATED
from scheduling.core.queueing.pods_ready import WaitForPodsReady
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import Resources, TopologyPolicy
from scheduling.models import Event, Pod, Workload
from scheduling.worker.cache import ClusterCache
from scheduling.worker.reclaim import ReclaimFeed
from sim.arrivals import Arrival
from sim.cluster import PRESETS, build_nodes
from sim.spec import ClusterSpec, ShapeSpec
from sim.utilization import UtilizationProfile

HOLDING = {*Pod.PLACED_PHASES, Pod.Phase.TERMINATING}  # a terminating pod still holds its GPUs


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
        if phase in Pod.PLACED_PHASES:
            sample.placed[job] += 1
    return sample


def _first_estimates(etas: dict[str, tuple[float, float] | None], start_s: float) -> None:
    """The first estimate the cycle recorded for each waiting job (scheduling.worker.estimates), in
    seconds from the window's start: what the API told its tenant soon after it arrived."""
    rows = (
        Workload.objects.filter(estimated_at__isnull=False)
        .exclude(name__in=list(etas))
        .values_list("name", "start_p50", "start_p90")
    )
    for name, p50, p90 in rows:
        etas[name] = (p50.timestamp() - start_s, p90.timestamp() - start_s) if p50 and p90 else None


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
    etas: dict[str, tuple[float, float] | None] = {}  # the first estimate after arrival
    placed_now: set[str] = set()
    partial: set[str] = set()
    try:
        for tenant in tenants:  # as `createtenant` does; each tenant's namespace is its name
            services.tenant_create(name=tenant)
        cluster.apply_queues(queue_documents(policy, shares, capacity, trace.history))
        scheduler = cluster.cycle(
            framework,
            clock=clock,
            lease_duration_s=10 * horizon,
            cache=ClusterCache(monotonic=clock.monotonic),
            reclaim_feed=ReclaimFeed(monotonic=clock.monotonic, enabled=False),
            # As in the core's run (and Kueue's default): no waitForPodsReady; on a grid of
            # minutes its 5-minute timeout would judge the grid, not the scheduler.
            pods_ready=WaitForPodsReady(timeout_s=0),
            # FIFO is Kueue's default, without gpusched's starvation bound (as in the core's run)
            starving_after_s=None if policy == "fifo" else DEFAULT_STARVING_AFTER_S,
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
            worlds.run_cycles(scheduler)
            cluster.step()  # what was bound starts now
            sample = _sample()
            _first_estimates(etas, trace.start.timestamp())
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
        evicted = Event.objects.filter(type="workload.evicted")
        moves = evicted.filter(payload__reason__startswith=CONSOLIDATED).count()
        preemptions = evicted.count() - moves
        released = Event.objects.filter(type="workload.reservation_released").count()
    finally:
        cluster.close()

    waits: dict[str, list[float]] = defaultdict(list)
    for key, job in jobs.items():
        waits[job.tenant].append(started_at.get(key, end) - job.arrival_s)
    big = [k for k, j in jobs.items() if j.pods > 1 and j.gpus >= BIG_GANG_GPUS]
    accuracy = eta_accuracy(
        {k: Started(jobs[k].arrival_s, at) for k, at in started_at.items()},
        {k: eta for k, eta in etas.items() if eta is not None},
    )
    return PolicyResult(
        policy=policy,
        jain=jain([meter.ratio(t) for t in tenants if meter.ratio_time[t] > 0]),
        worst_tenant_wait_p95_s=max((percentile(w, 0.95) for w in waits.values()), default=0.0),
        gpu_allocation=meter.share(meter.allocated),
        gpu_utilization=meter.share(meter.used),
        gangs_started=sum(1 for k in started_at if jobs[k].pods > 1),
        gangs_partially_started=len(partial),
        big_gangs_started=sum(1 for k in big if k in started_at),
        big_gang_wait_p95_s=percentile(
            [started_at.get(k, end) - jobs[k].arrival_s for k in big], 0.95
        ),
        eta_coverage=accuracy.coverage,
        eta_median_rel_error=accuracy.median_rel_error,
        eta_p90_hit_rate=accuracy.p90_hit_rate,
        eta_judged=accuracy.judged,
        reservations_released=released,
        jobs=len(jobs),
        jobs_started=len(started_at),
        preemptions=preemptions,
        moves=moves,
        tenants=meter.tenants(waits),
        simulated_s=t,
        wall_s=time.perf_counter() - started_wall,
        first_etas=etas,
    )
