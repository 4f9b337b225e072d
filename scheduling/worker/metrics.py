"""The scheduler process's Prometheus metrics, fed from each cycle's CycleReport.

`runscheduler --metrics-port N` and `runkube --metrics-port N` serve `registry` on :N/metrics
(the same cycle on either cluster side). Durations are observed for busy cycles only (pods
attempted, workloads admitted or evicted, reservations reconciled): an idle leader polls every
half second, and those near-zero cycles would drown the distribution of real ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge, Histogram

from common.process_metrics import role_registry
from scheduling.worker.cycle_report import PHASES

if TYPE_CHECKING:  # the worker may import this module to call record_eviction
    from scheduling.worker.cycle import CycleReport

registry = role_registry()

ATTEMPT_RESULTS = ("scheduled", "unschedulable", "conflict")
# Why a workload was evicted (label values of gpusched_evictions_total).
PREEMPTION = "preemption"  # CycleReport.preempted: room for another workload, on quota or nodes
RECLAIM = "reclaim"  # CycleReport.reclaimed: lent capacity whose owner uses it again

attempts = Counter(
    "gpusched_scheduling_attempts",
    "Pod scheduling attempts by result: scheduled (bound), unschedulable (fits nowhere), "
    "conflict (the database refused the bind).",
    ["result"],
    registry=registry,
)
gangs_bound = Counter("gpusched_gangs_bound", "Gangs bound all together.", registry=registry)
workloads_admitted = Counter(
    "gpusched_workloads_admitted", "Workloads admitted (quota reserved).", registry=registry
)
evictions = Counter(
    "gpusched_evictions",
    "Workloads evicted and requeued by the scheduler, by reason: preemption (room for another "
    "workload, on quota or on nodes) or reclaim (lent GPU capacity its owner uses again).",
    ["reason"],
    registry=registry,
)
reservations_reconciled = Counter(
    "gpusched_reservations_reconciled",
    "Expired reservations released on becoming leader.",
    registry=registry,
)
deferred_pods = Counter(
    "gpusched_scheduling_deferred_pods",
    "Pods placed by a cycle that passed its deadline (GPUSCHED_CYCLE_DEADLINE_S) and left, "
    "pending, for the next cycle.",
    registry=registry,
)
events_dropped = Counter(
    "gpusched_kube_events_dropped",
    "Kubernetes Events not posted for being over runkube's rate limit (GPUSCHED_KUBE_EVENTS_PER_S, "
    "GPUSCHED_KUBE_EVENT_BURST), as kube-scheduler's client drops them; Bindings are never "
    "limited.",
    registry=registry,
)
cycles_over_deadline = Counter(
    "gpusched_scheduling_cycles_over_deadline",
    "Cycles that passed their deadline and left work (placements, or the next batch) for the "
    "next cycle, which starts at once.",
    registry=registry,
)
reservations_held = Gauge(
    "gpusched_reservations_held",
    "Gangs and large pods holding the nodes predicted to free first for them (after the "
    "leader's latest scheduling pass).",
    registry=registry,
)
reservations_released = Counter(
    "gpusched_reservations_released",
    "Reservations given up because they could not complete within their horizon (each with a "
    "ReservationReleased event giving the reason).",
    registry=registry,
)
leader = Gauge(
    "gpusched_scheduler_leader",
    "1 while this process holds the scheduler lease.",
    registry=registry,
)
nodes_quarantined = Gauge(
    "gpusched_nodes_quarantined",
    "Nodes kept out of placement because their recorded state contradicts their capacity; each "
    "comes back by itself once consistent (set by the leader every cycle).",
    registry=registry,
)
cycle_seconds = Histogram(
    "gpusched_scheduling_cycle_duration_seconds",
    "Busy scheduling cycles: the sum of their phases.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
    registry=registry,
)
phase_seconds = Histogram(
    "gpusched_scheduling_phase_duration_seconds",
    "Busy scheduling cycles, by phase.",
    ["phase"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=registry,
)
pod_schedule_seconds = Histogram(
    "gpusched_scheduling_pod_duration_seconds",
    "Scheduling-algorithm time per attempted pod (filter, score, reserve, preemption): the "
    "cycle's schedule phase divided by its pods, observed once per pod.",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
    registry=registry,
)
queue_objects_refused = Gauge(
    "gpusched_queue_objects_refused",
    "1 while the Kueue objects read from the Kubernetes cluster are refused: the last good "
    "queues stay and scheduling goes on; the reason is in /api/v1/admin/clusterqueues "
    "(queueSource) and on the dashboard's queues page.",
    registry=registry,
)

# Every labelled series exists from the start, so rate() and absent() see a zero, not nothing.
for _result in ATTEMPT_RESULTS:
    attempts.labels(result=_result)
for _reason in (PREEMPTION, RECLAIM):
    evictions.labels(reason=_reason)
for _phase in PHASES:
    phase_seconds.labels(phase=_phase)


def is_busy(report: CycleReport) -> bool:
    return bool(report.attempted or report.admitted or report.reconciled or report.reclaimed)


def record_cycle(report: CycleReport) -> None:
    """Count what one `SchedulingCycle.run_once()` did, on either cluster side."""
    leader.set(1 if report.leading else 0)
    if not report.leading:
        return
    _record_leader_work(report)
    # The attempts last: a scrape (from the server's thread) that sees a cycle's pods counted
    # sees everything else of that cycle too.
    attempts.labels(result="scheduled").inc(report.bound)
    attempts.labels(result="unschedulable").inc(report.unschedulable)
    attempts.labels(result="conflict").inc(report.conflicts)


def _record_leader_work(report: CycleReport) -> None:
    nodes_quarantined.set(report.quarantined)
    gangs_bound.inc(report.gangs_bound)
    workloads_admitted.inc(report.admitted)
    reservations_reconciled.inc(report.reconciled)
    reservations_held.set(report.reserved)
    reservations_released.inc(report.reservations_released)
    record_eviction(PREEMPTION, report.preempted)
    record_eviction(RECLAIM, report.reclaimed)
    deferred_pods.inc(report.deferred)
    if report.over_deadline:
        cycles_over_deadline.inc()
    if is_busy(report):
        phases = report.phase_seconds()
        for phase, seconds in phases.items():
            phase_seconds.labels(phase=phase).observe(seconds)
        cycle_seconds.observe(sum(phases.values()))
        if report.attempted:
            per_pod = report.schedule_s / report.attempted
            for _ in range(report.attempted):
                pod_schedule_seconds.observe(per_pod)


def record_eviction(reason: str, workloads: int = 1) -> None:
    """Count `workloads` evicted for `reason`, a short fixed word (a label value: never a name
    or a free-form message). record_cycle counts the evictions a CycleReport carries; an
    eviction path outside the cycle report calls this itself."""
    if workloads:
        evictions.labels(reason=reason).inc(workloads)


def record_queue_objects(*, refused: bool) -> None:
    """Whether the cluster's Kueue objects are refused now (kube.kueue, outside the cycle
    report: the side reads them)."""
    queue_objects_refused.set(1 if refused else 0)
