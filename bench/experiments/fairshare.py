"""Fair sharing against FIFO on Microsoft's Philly trace (the Pollux digest: submit time, duration,
GPUs, virtual cluster = tenant), driving the pure core: the admission cycle of
scheduling.core.queueing and the scheduling framework with gangs (schedule_batch).

Two policies on the same simulated cluster and the same jobs:
- `fifo`: one ClusterQueue holding the whole cluster, every tenant's LocalQueue pointing at it,
  BestEffortFIFO (Kueue's default): jobs are admitted in arrival order, skipping those that do not
  fit yet;
- `gpusched`: one ClusterQueue per tenant in one cohort, nominal GPU quota proportional to the
  tenant's share of the trace's GPU time (largest remainder, summing to the cluster), borrowing
  without limit, BestEffortFIFO, fair sharing (Kueue's DRS) ordering the heads across queues, and
  reclaimWithinCohort: Any (an owner takes lent quota back by preempting borrowers; a preempted job
  starts over), made topology-aware for gangs: an admitted gang whose queue is within its quota
  but whose pods do not fit evicts the fewest jobs of borrowing queues that free the nodes it
  needs (scheduling.core.queueing.gang_reclaim);
  A gang whose reservation cannot complete within the horizon moves movable work (the Philly
  jobs are batch DNN training, taken as checkpoint-friendly: a moved job resumes where it was,
  after `RESTORE_S`) off the fewest servers, only when every moved job fits elsewhere at once
  (scheduling.core.queueing.consolidation); the moved jobs are requeued and placed again, and
  keep their first start (their wait) and the work done;
- `gpusched-no-reclaim`: the same without preemption (an ablation: borrowers keep what they took
  until their jobs end).

Jobs larger than one server become gangs of equal pods (minCount = count), placed all or nothing.
Time advances from event to event (arrivals, ends), on a grid of `step_s`; after each event the
admission cycle runs, then the admitted jobs' pods are placed, in the fair-share order (the
queues' dominant shares, then arrival), with reservations for gangs and large pods that follow
that order (both gpusched policies; scheduling.core.queueing.backfill). Run times are learnt
from finished jobs only, starting with the trace's jobs that had finished before the window. A
job waits from its arrival until all its pods are placed; a preempted job starts over.

Measures, over the jobs that arrive in the window:
- per tenant: jobs, started, p50/p95/mean wait (jobs not started by the end count their wait so
  far);
- `jain`: Jain's index over tenants of the time-averaged allocation / fair share while the cluster
  is contended (the tenants' demand exceeds it) and the tenant has work, the fair share being the
  weighted max-min (water-filling) share of the cluster given every tenant's demand (running plus
  waiting GPUs) at that moment, weights = the tenants' shares: 1 when every tenant gets exactly its
  fair share, lower as some get more and others less;
- `gpu_allocation`: time-averaged allocated GPUs / cluster GPUs, from the first arrival to the last
  arrival of the window; `gpu_utilization`: the same weighted by each tenant's (synthetic, seeded)
  utilization, as the simulator does for Philly tenants;
- `moves`: jobs moved by consolidation;
- `gangs_started`, and `gangs_partially_started` (a gang with some but not all pods placed, at any
  moment): must be 0; `big_gangs_started` and `big_gang_wait_p95_s`: the same for gangs of at
  least 32 GPUs (their p95 wait; one not started by the end counts its wait so far);
- ETA accuracy, for the jobs that started after waiting at least 10 minutes, judged on the first
  estimated start the scheduler gave them (at the step they arrived in): `eta_coverage` (share
  that had one), `eta_median_rel_error` (median of |estimated p50 start - actual start| / actual
  wait) and `eta_p90_hit_rate` (share that started by the estimated p90 start, i.e. inside the
  interval [submission, p90]).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bench.experiments.eta import QueueView, Runtimes, Started, eta_accuracy, forecast
from bench.experiments.fairness import FairnessMeter, jain, percentile
from bench.experiments.philly import FLAVOR, Job, Trace, queues_for
from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.admission import QueuedWorkload, admission_cycle
from scheduling.core.queueing.backfill import (
    DEFAULT_STARVING_AFTER_S,
    STARVING_RANK,
    BackfillPolicy,
    FairOrder,
    ReservationBook,
)
from scheduling.core.queueing.batch import Eviction, schedule_batch
from scheduling.core.queueing.config import (
    ResourceFlavor,
)
from scheduling.core.queueing.consolidation import REASON as CONSOLIDATED
from scheduling.core.queueing.consolidation import consolidation_victims
from scheduling.core.queueing.forecast import Queues
from scheduling.core.queueing.gang_reclaim import gang_victims
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import QuotaBook
from scheduling.core.queueing.resources import Demand
from scheduling.core.queueing.runtime import JobShape
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import GangRef, PodRequest, TopologyPolicy
from sim.cluster import PRESETS, build_nodes

GPU_MODEL = "Tesla-P100-PCIE-16GB"
BIG_GANG_GPUS = 32
ETA_EVERY_S = 600.0  # estimated starts are computed this often (not per job)
RESERVATION_HORIZON_S = 6 * 3600.0
RESTORE_S = 300.0  # a moved (checkpointed) job's restart: an assumption, not a measured figure
Progress = Callable[[str, float], None]  # (policy, fraction of the window simulated)


@dataclass
class _JobState:
    job: Job
    queued_at: float  # arrival (kept across preemptions: FIFO position is the arrival)
    started_at: float | None = None
    ends_at: float | None = None
    placements: list[Decision] = field(default_factory=list)
    admitted: bool = False
    epoch: int = 0  # bumps on preemption so stale end events are ignored
    # Kept across moves (consolidation), reset by a preemption: the first start (what its wait
    # ends at) and the work done before the latest move.
    first_started_at: float | None = None
    done_s: float = 0.0


@dataclass
class PolicyResult:
    policy: str
    jain: float
    worst_tenant_wait_p95_s: float
    gpu_allocation: float
    gpu_utilization: float
    gangs_started: int
    gangs_partially_started: int
    big_gangs_started: int
    big_gang_wait_p95_s: float
    eta_coverage: float
    eta_median_rel_error: float | None
    eta_p90_hit_rate: float | None
    eta_judged: int  # jobs that waited >= 10 minutes and started
    reservations_released: int
    jobs: int
    jobs_started: int
    preemptions: int
    moves: int
    tenants: dict[str, dict[str, float]]
    simulated_s: float
    wall_s: float
    # Per job, the first estimated (p50, p90) start it was given (None: unknown), in seconds
    # from the window's start: what ETA accuracy is judged on (not in the JSON document)
    first_etas: dict[str, tuple[float, float] | None] = field(default_factory=dict)
    # Per big gang, its wait (what big_gang_wait_p95_s is the p95 of; not in the JSON document)
    big_gang_waits: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "jain": round(self.jain, 4),
            "worst_tenant_wait_p95_s": round(self.worst_tenant_wait_p95_s, 1),
            "gpu_allocation": round(self.gpu_allocation, 4),
            "gpu_utilization": round(self.gpu_utilization, 4),
            "gangs_started": self.gangs_started,
            "gangs_partially_started": self.gangs_partially_started,
            "big_gangs_started": self.big_gangs_started,
            "big_gang_wait_p95_s": round(self.big_gang_wait_p95_s, 1),
            "eta_coverage": round(self.eta_coverage, 4),
            "eta_median_rel_error": _rounded(self.eta_median_rel_error),
            "eta_p90_hit_rate": _rounded(self.eta_p90_hit_rate),
            "eta_judged": self.eta_judged,
            "reservations_released": self.reservations_released,
            "jobs": self.jobs,
            "jobs_started": self.jobs_started,
            "preemptions": self.preemptions,
            "moves": self.moves,
            "simulated_s": round(self.simulated_s, 1),
            "wall_s": round(self.wall_s, 2),
            "tenants": self.tenants,
        }


def simulate(
    trace: Trace,
    policy: str,
    framework: Framework,
    *,
    nodes: int,
    step_s: float = 60.0,
    drain_days: float = 7.0,
    progress: Progress | None = None,
) -> PolicyResult:
    started_wall = time.perf_counter()
    pool = PRESETS["pcie-8gpu-2socket"]
    snapshot = ClusterSnapshot(
        build_nodes([replace(pool, count=nodes, gpu_model=GPU_MODEL, gpu_memory_mib=16_280)])
    )
    capacity = int(snapshot.gpu_count.sum())
    tenants = sorted({j.tenant for j in trace.jobs} | set(trace.shares))
    shares = {t: trace.shares.get(t, 0.0) for t in tenants}
    cluster_queues, queue_of = queues_for(policy, shares, capacity)
    flavors = {FLAVOR: ResourceFlavor(FLAVOR)}

    states = {j.key: _JobState(j, j.arrival_s) for j in trace.jobs}
    arrivals = sorted(trace.jobs, key=lambda j: (j.arrival_s, j.key))
    window_end = trace.days * 86400.0
    horizon = window_end + drain_days * 86400.0
    pending: dict[str, QueuedWorkload] = {}
    admitted: dict[str, AdmittedWorkload] = {}
    unplaced: list[str] = []
    ends: list[tuple[float, int, str]] = []  # (end time, epoch, job key)
    preemptions = 0
    moves = 0
    gangs_seen: set[str] = set()  # gang jobs started at least once
    partial = 0
    etas: dict[str, tuple[float, float] | None] = {}  # the first estimated (p50, p90) start

    # Integrals over time of the state between events.
    meter = FairnessMeter(
        shares, {j.tenant: j.utilization for j in trace.jobs}, capacity, window_end
    )
    running_gpus: dict[str, int] = defaultdict(int)
    waiting_gpus: dict[str, int] = defaultdict(int)

    def grid(t: float) -> float:
        return math.ceil(t / step_s) * step_s

    reclaims = policy == "gpusched"
    runtimes = Runtimes()
    for old in trace.history:  # what the cluster had learnt before the window
        runtimes.finished(_shape(old), old.duration_s, old.arrival_s + old.duration_s)
    book = ReservationBook() if policy != "fifo" else None  # gpusched reserves for gangs
    # gpusched's starvation bound (core.queueing.admission and backfill); FIFO is Kueue's
    starving_after_s = None if book is None else DEFAULT_STARVING_AFTER_S
    released = 0
    eta_due: list[str] = []
    last_forecast = -math.inf

    def predicted_end(key: str, q: float) -> float | None:
        state = states[key]
        if state.started_at is None:
            return None
        ran = t - state.started_at + state.done_s
        total = runtimes.total(key, _shape(state.job), q, ran, long_run=True)
        return None if total is None else t - ran + total

    def fair_order() -> FairOrder:
        """The queues' dominant shares now (DRS), as the admission cycle ranks them."""
        quota = QuotaBook(cluster_queues)
        for a in admitted.values():
            quota.charge(a.cluster_queue, a.usage)
        share = {name: float(quota.dominant_resource_share(name)[0]) for name in quota.queues}
        return FairOrder(lambda pod: queue_of[pod.tenant], share)

    def backfill_policy(order: FairOrder) -> BackfillPolicy | None:
        if book is None:
            return None
        return BackfillPolicy(
            now=t,
            ends_at=lambda held: predicted_end(_job_of(held.pod), 0.5),
            runtime_s=lambda pod: runtimes.total(
                _job_of(pod), _shape(states[_job_of(pod)].job), 0.9, long_run=True
            ),
            book=book,
            horizon_s=RESERVATION_HORIZON_S,
            fair_order=order,
        )

    def batch_rank(
        key: str, order: FairOrder, backfill: BackfillPolicy | None
    ) -> tuple[float, float, str]:
        """In the fair-share order, then FIFO: the heads DRS serves first reserve first; gangs
        past the starvation bound before all, oldest first."""
        state = states[key]
        if backfill is not None and state.job.pods > 1 and backfill.starving(state.job.arrival_s):
            return (STARVING_RANK, state.queued_at, key)
        return (order.share[queue_of[state.job.tenant]], state.queued_at, key)

    def reclaim(members: Sequence[PodRequest]) -> Eviction | None:
        """Topology-aware reclaim: an admitted gang whose queue is within its quota may evict
        jobs of queues borrowing from the cohort to get the nodes it needs (whole jobs)."""
        if not reclaims:
            return None
        book = QuotaBook(cluster_queues)
        for a in admitted.values():
            book.charge(a.cluster_queue, a.usage)
        own = queue_of[states[_job_of(members[0])].job.tenant]
        if book.is_borrowing(own):
            return None
        borrowing = {name for name in book.queues if name != own and book.is_borrowing(name)}

        def evictable(held: HeldPod) -> bool:
            state = states[_job_of(held.pod)]
            return (
                state.started_at is not None
                and bool(state.placements)
                and queue_of[state.job.tenant] in borrowing
            )

        victims = gang_victims(framework, snapshot, members, evictable)
        if not victims:
            return None
        jobs = dict.fromkeys(_job_of(v.pod) for v in victims)
        whole = tuple(snapshot.pods.held[d.pod.uid] for key in jobs for d in states[key].placements)
        return Eviction(whole, "reclaim within cohort", members[0])

    def consolidate(members: Sequence[PodRequest]) -> Eviction | None:
        """Move running jobs off the servers a gang needs, when its reservation cannot complete
        within the horizon (every Philly job is batch, and may move)."""
        if not reclaims:
            return None
        victims = consolidation_victims(framework, snapshot, members, lambda held: True)
        if not victims:
            return None
        return Eviction(tuple(victims), CONSOLIDATED, members[0])

    def requeue(key: str) -> None:
        admitted.pop(key, None)
        vjob = states[key].job
        pending[key] = _queued(vjob, queue_of[vjob.tenant], vjob.arrival_s)

    k = 0
    t = 0.0
    while True:
        candidates = []
        if k < len(arrivals):
            candidates.append(arrivals[k].arrival_s)
        if ends:
            candidates.append(ends[0][0])
        if not candidates or t > horizon:
            break
        t = max(t, grid(min(candidates)))
        meter.advance(t, running_gpus, waiting_gpus)
        if progress is not None:
            progress(policy, min(1.0, t / window_end))

        # 1. Ends.
        while ends and ends[0][0] <= t:
            _, epoch, key = heapq.heappop(ends)
            state = states[key]
            if epoch != state.epoch or state.started_at is None:
                continue
            for decision in state.placements:
                framework.forget(decision, snapshot)
            state.placements = []
            running_gpus[state.job.tenant] -= state.job.gpus
            admitted.pop(key, None)
            state.ends_at = t
            runtimes.finished(_shape(state.job), t - state.started_at + state.done_s, t)

        # 2. Arrivals.
        arrived: list[str] = []
        while k < len(arrivals) and arrivals[k].arrival_s <= t:
            job = arrivals[k]
            k += 1
            arrived.append(job.key)
            pending[job.key] = _queued(job, queue_of[job.tenant], job.arrival_s)
            waiting_gpus[job.tenant] += job.gpus

        # 3. Admission (and quota preemption).
        if pending:
            result = admission_cycle(
                cluster_queues,
                flavors,
                list(pending.values()),
                list(admitted.values()),
                now=t,
                starving_after_s=starving_after_s,
            )
            for admission in result.admitted:
                for victim in admission.victims:
                    preemptions += 1
                    for decision in states[victim].placements:
                        framework.forget(decision, snapshot)
                    _requeue(states[victim], running_gpus, waiting_gpus)
                    requeue(victim)
                    if victim in unplaced:
                        unplaced.remove(victim)
                key = admission.workload.key
                del pending[key]
                admitted[key] = AdmittedWorkload(
                    key,
                    admission.workload.cluster_queue,
                    created_at=admission.workload.created_at,
                    admitted_at=t,
                    usage=admission.assignment.usage,
                    local_queue=admission.workload.local_queue,
                )
                states[key].admitted = True
                unplaced.append(key)

        # 4. Placement of admitted jobs, gangs all or nothing.
        if unplaced:
            order = fair_order()
            backfill = backfill_policy(order)

            unplaced.sort(key=lambda key: batch_rank(key, order, backfill))
            pods = [pod for key in unplaced for pod in _pods(states[key].job)]
            outcome = schedule_batch(
                framework,
                snapshot,
                pods,
                reclaim_gang=reclaim,
                backfill=backfill,
                consolidate_gang=consolidate,
            )
            released += len(outcome.released)
            for eviction in outcome.evictions:  # the batch forgot the victims already
                for key in dict.fromkeys(_job_of(v.pod) for v in eviction.victims):
                    if eviction.reason == CONSOLIDATED:
                        moves += 1
                        _move(states[key], t, running_gpus, waiting_gpus)
                    else:
                        preemptions += 1
                        _requeue(states[key], running_gpus, waiting_gpus)
                    requeue(key)
            placed: dict[str, list[Decision]] = defaultdict(list)
            for decision in outcome.placed:
                placed[_job_of(decision.pod)].append(decision)
            for group in outcome.gangs:
                for decision in group:
                    placed[_job_of(decision.pod)].append(decision)
                gangs_seen.add(_job_of(group[0].pod))
            for key, decisions in placed.items():
                state = states[key]
                state.placements = decisions
                state.started_at = t
                state.epoch += 1
                left = state.job.duration_s
                if state.first_started_at is None:
                    state.first_started_at = t
                else:
                    left += RESTORE_S - state.done_s
                heapq.heappush(ends, (t + left, state.epoch, key))
                running_gpus[state.job.tenant] += state.job.gpus
                waiting_gpus[state.job.tenant] -= state.job.gpus
            unplaced = [key for key in unplaced if key not in placed]
            partial += sum(
                1
                for name in snapshot.pods.gangs
                if snapshot.pods.gang_size(name) < states[name].job.pods
            )

        # 5. The estimated start new arrivals are given, computed every ETA_EVERY_S.
        eta_due += arrived
        if eta_due and t - last_forecast >= ETA_EVERY_S:
            due = [key for key in eta_due if states[key].started_at is None]
            eta_due, last_forecast = [], t
            if due:
                given = forecast(
                    QueueView(
                        framework,
                        snapshot,
                        t,
                        Queues(cluster_queues, flavors, starving_after_s=starving_after_s),
                        list(admitted.values()),
                        list(unplaced),
                        dict(pending),
                        lambda key: _pods(states[key].job),
                        lambda key: _shape(states[key].job),
                        lambda key: states[key].started_at,
                        _job_of,
                        book,
                        RESERVATION_HORIZON_S,
                        fair_order(),
                    ),
                    runtimes,
                )
                for key in due:
                    etas[key] = given.get(key)

    meter.advance(max(t, window_end), running_gpus, waiting_gpus)
    waits: dict[str, list[float]] = defaultdict(list)
    started = 0
    for state in states.values():
        if state.first_started_at is not None:
            started += 1
            waits[state.job.tenant].append(state.first_started_at - state.job.arrival_s)
        else:
            waits[state.job.tenant].append(max(t, window_end) - state.job.arrival_s)
    ratios = [meter.ratio(t) for t in tenants if meter.ratio_time[t] > 0]
    big_waits = {
        key: (s.first_started_at if s.first_started_at is not None else max(t, window_end))
        - s.job.arrival_s
        for key, s in states.items()
        if s.job.pods > 1 and s.job.gpus >= BIG_GANG_GPUS
    }
    accuracy = eta_accuracy(
        {
            key: Started(s.job.arrival_s, s.first_started_at)
            for key, s in states.items()
            if s.first_started_at is not None
        },
        etas,
    )
    return PolicyResult(
        policy=policy,
        jain=jain(ratios),
        worst_tenant_wait_p95_s=max(
            (percentile(w, 0.95) for w in waits.values() if len(w) >= 1), default=0.0
        ),
        gpu_allocation=meter.share(meter.allocated),
        gpu_utilization=meter.share(meter.used),
        gangs_started=len(gangs_seen),
        gangs_partially_started=partial,
        big_gangs_started=sum(1 for key in gangs_seen if states[key].job.gpus >= BIG_GANG_GPUS),
        big_gang_wait_p95_s=percentile(list(big_waits.values()), 0.95),
        eta_coverage=accuracy.coverage,
        eta_median_rel_error=accuracy.median_rel_error,
        eta_p90_hit_rate=accuracy.p90_hit_rate,
        eta_judged=accuracy.judged,
        reservations_released=released,
        jobs=len(states),
        jobs_started=started,
        preemptions=preemptions,
        moves=moves,
        tenants=meter.tenants(waits),
        simulated_s=t,
        wall_s=time.perf_counter() - started_wall,
        first_etas=etas,
        big_gang_waits=big_waits,
    )


def _shape(job: Job) -> JobShape:
    """What a scheduler knows of a Philly job before it runs (the digest has no names)."""
    return JobShape(job.tenant, pod_sets=((job.pods, job.per_pod),))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def _queued(job: Job, cluster_queue: str, created_at: float) -> QueuedWorkload:
    return QueuedWorkload(
        key=job.key,
        cluster_queue=cluster_queue,
        local_queue=f"{job.tenant}/default",
        created_at=created_at,
        demand=Demand(gpu_milli=job.gpus * 1000),
    )


def _pods(job: Job) -> list[PodRequest]:
    gang = GangRef(job.key, job.pods) if job.pods > 1 else None
    return [
        PodRequest(
            uid=f"{job.key}/{k}",
            namespace=job.tenant,
            tenant=job.tenant,
            cpu_milli=4000 * job.per_pod,
            memory_mib=32_768 * job.per_pod,
            gpus=job.per_pod,
            topology_policy=TopologyPolicy.BEST_EFFORT if job.per_pod > 1 else TopologyPolicy.NONE,
            gang=gang,
            created_at=job.arrival_s,
        )
        for k in range(job.pods)
    ]


def _job_of(pod: PodRequest) -> str:
    return pod.uid.rsplit("/", 1)[0]


def _requeue(state: _JobState, running_gpus: dict[str, int], waiting_gpus: dict[str, int]) -> None:
    """An evicted job (its pods already forgotten in the snapshot) waits again from scratch."""
    if state.started_at is not None and state.placements:
        running_gpus[state.job.tenant] -= state.job.gpus
        waiting_gpus[state.job.tenant] += state.job.gpus
    state.placements = []
    state.started_at = None
    state.first_started_at = None
    state.done_s = 0.0
    state.admitted = False
    state.epoch += 1  # its pending end event is void; it starts over


def _move(
    state: _JobState, now: float, running_gpus: dict[str, int], waiting_gpus: dict[str, int]
) -> None:
    """A job moved by consolidation (its pods already forgotten in the snapshot): it waits to
    be placed again, keeping its first start and the work it has done (it checkpoints)."""
    assert state.started_at is not None
    state.done_s += now - state.started_at
    running_gpus[state.job.tenant] -= state.job.gpus
    waiting_gpus[state.job.tenant] += state.job.gpus
    state.placements = []
    state.started_at = None
    state.admitted = False
    state.epoch += 1  # its pending end event is void: a new one comes when it restarts
