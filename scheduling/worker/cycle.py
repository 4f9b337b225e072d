"""One scheduling cycle for both cluster sides (DESIGN.md §8), written once against the protocol of
scheduling.worker.side. `run_once()` does one cycle and says whether more work is waiting, so tests
call it directly and the commands (`runscheduler`, `runkube`) only loop and sleep. The numbered
phases below read top to bottom in `_cycle`, as kube-scheduler's schedule_one.go does; admission is
in scheduling.worker.cycle_admission, evictions in scheduling.worker.cycle_evictions, the rest in
the core and the services.

 1. Lead, or stand by; a new leader releases the reservations a crashed predecessor left.
 2. Sync the side: what changed outside gpusched comes into the database; then the cluster's
    state, in which a node whose recorded state contradicts its capacity is quarantined (nothing
    is placed there, the rest schedules on) and reported.
 3. Admit: an admission cycle over the cluster queues (quota, flavors, fair sharing, cohort
    trees; without any cluster queue, or where the cluster admitted already, everything is
    admitted); a flavor none of whose nodes could ever host a pod set is never chosen (judged by
    the profile's filters on the emptied cluster). First, admitted workloads whose pods were not
    all placed within the pods-ready timeout are evicted and requeued with backoff (Kueue's
    waitForPodsReady); deactivated workloads and drained queues are evicted, then the victims
    of quota preemption, before anything is admitted.
 4. Reclaim: what idle owners may lend, and the lent pods whose owners use it again.
 5. Take a batch of pending pods the side can place, in the profile's queue order, whole gangs.
 6. Snapshot: nodes, GPUs and allocations, kept current from the outbox, with DCGM's load.
 7. Schedule the batch into the snapshot (scheduling.core.queueing.batch): gangs all or nothing;
    preemption, gang reclaim and consolidation (a gang whose reservation cannot complete within
    the horizon moves movable work off the nodes it needs) return eviction intents; nothing is
    written meanwhile.
 8. Evict on the side, then commit what it accepted. The side is asked first because it may
    refuse (a disruption budget), and a refused eviction must leave no trace in the database.
 9. Commit the placements in the database: its constraints refuse any over-commit.
10. Make them real on the side (Kubernetes: Bindings); what the cluster refuses goes back to the
    queue.
11. Report why the others wait: per pod, per workload, and to the side.

What step 10 sends is answered while the next cycle runs, as kube-scheduler's binding cycles run
beside its scheduling cycle: the placements are committed and held in the snapshot meanwhile
(assumed), their answers are taken when the next cycle starts, and what the side refused goes
back to the queue then. A cycle that leaves no more work waits for every answer, so nothing is in
flight while the loop sleeps; at most `IN_FLIGHT_BATCHES` batches' pods are in flight at once.

A cycle has a deadline (`deadline_s`, SCHEDULER_CYCLE_DEADLINE_S): past it, the placements not yet
committed are forgotten and wait for the next cycle (after the first chunk or gang: every cycle
commits something), and no batch is taken after admission, reclaim or node actions that did work
(the next cycle has less of it). The report counts what was left (`deferred`, `over_deadline`) and
says more is waiting, so the next cycle starts at once, taking no more pods than the last got
through in time (doubling back as cycles keep within the deadline): what is deferred was scheduled
for nothing. Each chunk committed tells the loop's liveness (common.process_metrics.heartbeat), as
each eviction batch does.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cmp_to_key

from django.conf import settings
from django.utils import timezone

from common.process_metrics import heartbeat
from scheduling import services
from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing.backfill import (
    DEFAULT_HORIZON_S,
    BackfillPolicy,
    FairOrder,
    ReleasedReservation,
    ReservationBook,
)
from scheduling.core.queueing.batch import classify, schedule_batch
from scheduling.core.queueing.feasibility import EmptyClusterFeasibility
from scheduling.core.queueing.pods_ready import WaitForPodsReady
from scheduling.core.reclaim import reclaimed_reason
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.types import NodeSpec, PodRequest
from scheduling.models import Pod, Workload
from scheduling.worker import cluster_state, node_actions, queue_state
from scheduling.worker.cache import ClusterCache
from scheduling.worker.cluster_state import ClusterState
from scheduling.worker.cycle_admission import Admission
from scheduling.worker.cycle_evictions import Evictions, gang_consolidation, gang_reclaim
from scheduling.worker.cycle_report import CycleReport
from scheduling.worker.estimates import StartEstimator
from scheduling.worker.load_feed import LoadFeed
from scheduling.worker.reclaim import ReclaimFeed
from scheduling.worker.runtime_feed import RuntimeFeed
from scheduling.worker.side import Answered, Binding, ClusterSide, Elector, Waiting

logger = logging.getLogger(__name__)

# Committed placements the side may still be making real when a cycle ends, in batches: enough
# to keep the side busy through the next cycle, few enough that a slow API server holds up the
# scheduler instead of an unbounded queue of Bindings.
IN_FLIGHT_BATCHES = 2


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def pods_ready_settings() -> WaitForPodsReady:
    return WaitForPodsReady(
        timeout_s=settings.PODS_READY_TIMEOUT_S,
        backoff_base_s=settings.PODS_READY_BACKOFF_BASE_S,
        backoff_max_s=settings.PODS_READY_BACKOFF_MAX_S,
    )


@dataclass
class SchedulingCycle:
    framework: Framework
    side: ClusterSide
    elector: Elector
    identity: str = field(default_factory=default_identity)
    batch_size: int = 500
    commit_size: int = 250
    clock: Callable[[], datetime] = timezone.now
    cache: ClusterCache = field(default_factory=ClusterCache)
    load_feed: LoadFeed = field(default_factory=LoadFeed)
    reclaim_feed: ReclaimFeed = field(default_factory=ReclaimFeed)
    pods_ready: WaitForPodsReady = field(default_factory=pods_ready_settings)
    runtime_feed: RuntimeFeed = field(default_factory=RuntimeFeed)
    # Gangs and large pods that cannot be placed hold the nodes they need as they free up, for
    # at most this long (scheduling.core.queueing.backfill); a new leader starts afresh.
    reservation_horizon_s: float = DEFAULT_HORIZON_S
    # A workload waiting longer than this is starving: it stops its cohort's admissions while
    # no quota is free for it, and its reservation holds against every queue (issue 37).
    # GPUSCHED_STARVING_AFTER_S; None (0 there): none, as Kueue.
    starving_after_s: float | None = field(
        default_factory=lambda: settings.SCHEDULER_STARVING_AFTER_S or None
    )
    reservations: ReservationBook = field(default_factory=ReservationBook)
    estimator: StartEstimator = field(default_factory=StartEstimator)
    # Seconds a cycle may take before it yields what is left to the next (read by `timer`).
    deadline_s: float = field(default_factory=lambda: settings.SCHEDULER_CYCLE_DEADLINE_S)
    timer: Callable[[], float] = time.monotonic
    _due: float = field(default=0.0, init=False, repr=False)
    # How many pending pods the next batch takes (`batch_size` at most): after a cycle whose
    # deadline left placements over, what that cycle got through in time; doubled back after
    # each cycle that kept within it. A deferred placement was scheduled for nothing and is
    # scheduled again next cycle: on a loaded machine, where a full batch never fits the
    # deadline, that was every cycle's second half (issue 35).
    _batch_limit: int = field(default=0, init=False, repr=False)
    _quarantined: dict[str, str] | None = field(default=None, init=False, repr=False)
    # Chunks the side is making real, oldest first, each with whether it is a gang.
    _in_flight: list[tuple[_InFlight, bool]] = field(default_factory=list, init=False, repr=False)
    # Feasibility over the emptied cluster, kept while the nodes it was built from are current
    # (a rebuilt snapshot, or a cordon set or lifted in place, gives a new list of them).
    _feasibility: tuple[list[NodeSpec], EmptyClusterFeasibility] | None = field(
        default=None, init=False, repr=False
    )

    def run_once(self) -> CycleReport:
        report = CycleReport(side=self.side.name)
        try:
            self._take_answers(report, keep=None)
            self._cycle(report)
            limit = IN_FLIGHT_BATCHES * self.batch_size if report.more else 0
            self._take_answers(report, keep=limit)
            if report.synced and self.estimator.due():
                started = time.perf_counter()
                report.estimated = self._estimate()
                report.estimate_s = time.perf_counter() - started
            self.cache.freeze_kept()
            return report
        except Exception:
            # Whatever the snapshot assumed in this cycle may not be committed: start afresh.
            self.cache.invalidate()
            raise

    def _take_answers(self, report: CycleReport, *, keep: int | None) -> None:
        """The side's answers to what is in flight: every chunk answered already, then, oldest
        first, as many as must be waited for to leave at most `keep` pods in flight (None: wait
        for none). Every chunk taken is answered (its refusals requeued) before the first error,
        a lost lease say, is raised."""
        started = time.perf_counter()
        errors: list[Exception] = []
        waiting = sum(len(chunk.committed) for chunk, _ in self._in_flight)
        while self._in_flight:
            chunk, gang = self._in_flight[0]
            if not chunk.binding.done() and (keep is None or waiting <= keep):
                break
            self._in_flight.pop(0)
            waiting -= len(chunk.committed)
            try:
                if self._answered(chunk, report) and gang:
                    report.gangs_bound += 1
            except Exception as exc:
                errors.append(exc)
        report.commit_s += time.perf_counter() - started
        if errors:
            raise errors[0]

    def _estimate(self) -> int:
        """Estimated starts from the state this cycle left, every few seconds. Advisory: a
        failure is logged and scheduling goes on."""
        try:
            return self.estimator.run(
                self.framework,
                self.cache.state(),
                self.runtime_feed,
                self.reservations,
                self.reservation_horizon_s,
                self.clock(),
                admits=self.side.queues_admit,
                starving_after_s=self.starving_after_s,
            )
        except Exception:
            logger.exception("estimating starts failed; scheduling goes on")
            return 0

    def stand_down(self) -> None:
        """What is in flight is answered first (its refusals requeued), then the lease given up:
        a command that stops after a cycle leaves no committed placement it did not see made
        real or given back."""
        try:
            self._take_answers(CycleReport(side=self.side.name), keep=0)
        except Exception:
            logger.exception("answers to the last Bindings, taken while standing down")
        finally:
            self.elector.stand_down()

    def _cycle(self, report: CycleReport) -> CycleReport:
        now = self.clock()
        started = time.perf_counter()
        self._due = self.timer() + self.deadline_s

        # 1. Lead, or stand by.
        leadership = self.elector.lead(now)
        if not leadership.leading:
            report.sync_s = time.perf_counter() - started
            return report
        report.leading = True
        if leadership.new_term:
            report.reconciled = services.reservations_expire(now=now)
            self.cache.invalidate()

        # 2. Sync the side.
        synced = self.side.sync(now)
        report.side_counts = dict(synced.counts)
        if not synced.ready:
            report.sync_s = time.perf_counter() - started
            return report  # nothing is decided on a partial view
        report.synced = True
        report.quarantined = len(self._quarantine())
        report.sync_s = time.perf_counter() - started
        # Admins' cordons and drains of the cluster's nodes, before anything is placed.
        answered = node_actions.carry_out(self._evictions(), now, report)

        # 3. Admit.
        started = time.perf_counter()
        report.admitted, report.preempted = self._admission().run(now, report)
        report.admission_s = time.perf_counter() - started

        # 4. Reclaim.
        started = time.perf_counter()
        report.reclaimed = self._reclaim(now, report)
        report.reclaim_s = time.perf_counter() - started

        # Past the deadline after work that changed something: the batch waits for the next
        # cycle (which has that much less to do); after none, it is taken, or nothing would be.
        worked = answered or report.admitted or report.preempted or report.reclaimed
        if worked and self._past_due():
            report.over_deadline = report.more = True
            return report

        # 5. The next batch.
        started = time.perf_counter()
        limit = self._batch_limit or self.batch_size
        pods = self.side.placeable(
            cluster_state.with_gang_members(cluster_state.pending_pods(now, limit))
        )
        if not pods:
            report.select_s = time.perf_counter() - started
            return report
        requests = {pod.pk: self.load_feed.estimate(cluster_state.pod_request(pod)) for pod in pods}
        if self.framework.queue_sort is not None:
            less = self.framework.queue_sort.less
            pods.sort(
                key=cmp_to_key(lambda a, b: -1 if less(requests[a.pk], requests[b.pk]) else 1)
            )
        report.select_s = time.perf_counter() - started

        # 6. Snapshot with load; what the side protects, and what is terminating, is no victim.
        started = time.perf_counter()
        cluster = self.cache.state()
        self.load_feed.refresh(cluster, now)
        cluster.snapshot.pods.set_unevictable(
            terminating=cluster_state.terminating_pods(), protected=synced.protected
        )
        report.snapshot_s = time.perf_counter() - started

        # 7. Schedule, with reservations for gangs and large pods that cannot be placed.
        by_uid = {requests[pod.pk].uid: pod for pod in pods}
        started = time.perf_counter()
        outcome = schedule_batch(
            self.framework,
            cluster.snapshot,
            [requests[pod.pk] for pod in pods],
            evictions_free_at_once=self.side.evictions_free_at_once,
            reclaim_gang=lambda members: gang_reclaim(self.framework, members, cluster, by_uid),
            backfill=self._backfill(cluster, list(requests.values()), now, by_uid),
            consolidate_gang=lambda members: gang_consolidation(
                self.framework, members, cluster, by_uid
            ),
            nominated=cluster_state.nominated_pods(),
        )
        report.schedule_s = time.perf_counter() - started
        report.reserved = len(outcome.reservations)
        report.reservations_released = self._report_released(outcome.released, by_uid, now)

        # 8. Evictions: asked of the side, then committed.
        started = time.perf_counter()
        report.preempted += self._evictions().carry_out(
            outcome.evictions, cluster, by_uid, now, report
        )
        placed = [(by_uid[d.pod.uid], d) for d in outcome.placed]
        gangs = [[(by_uid[d.pod.uid], d) for d in group] for group in outcome.gangs]

        # 9-10. Commit, then make real: single pods in chunks, each gang in one go; past the
        # deadline, what is left waits for the next cycle. What the side makes real is in flight
        # while the next chunk commits, step 11 runs and the next cycle starts (the placements
        # assumed in the snapshot meanwhile).
        units = [
            (placed[k : k + self.commit_size], False)
            for k in range(0, len(placed), self.commit_size)
        ]
        units += [(members, True) for members in gangs]
        for k, (unit, gang) in enumerate(units):
            if k and self._past_due():
                self._defer([pod for rest, _ in units[k:] for pod in rest], cluster, report)
                break
            chunk = self._commit(cluster, unit, report, now, all_or_nothing=gang)
            self._in_flight.append((chunk, gang))
            heartbeat()
        report.commit_s = time.perf_counter() - started

        # 11. Why the others wait.
        started = time.perf_counter()
        failed = [(by_uid[d.pod.uid], d) for d in outcome.failed]
        nominated = {  # still waiting for the victims of an earlier cycle's preemption
            d.pod.uid: d.pod.nominated_node
            for d in outcome.failed
            if d.pod.nominated_node and cluster.snapshot.emptying(d.pod.nominated_node)
        } | outcome.nominated
        services.pods_unschedulable(failed=failed, now=now, nominated=nominated)
        self._record_workload_reasons(failed)
        report.reported += self.side.report(
            [Waiting(pod, pod.last_reason, pod.nominated_node) for pod, _ in failed], now
        )
        report.waiting_s = time.perf_counter() - started
        report.attempted = len(pods)
        report.unschedulable = len(failed)
        report.more = report.over_deadline or len(pods) >= limit
        self._size_next_batch(len(pods), report.deferred)
        return report

    def _size_next_batch(self, taken: int, deferred: int) -> None:
        """What the next batch takes: what this one got through before its deadline if it left
        placements over (at least one pod: each cycle commits something), else twice this
        limit, up to `batch_size`."""
        if deferred:
            self._batch_limit = min(self.batch_size, max(1, taken - deferred))
        elif self._batch_limit:
            doubled = 2 * self._batch_limit
            self._batch_limit = 0 if doubled >= self.batch_size else doubled

    def _past_due(self) -> bool:
        return self.timer() >= self._due

    def _defer(
        self, placed: list[tuple[Pod, Decision]], cluster: ClusterState, report: CycleReport
    ) -> None:
        """Placements left for the next cycle: the snapshot forgets them (their pods are still
        pending in the database), and the report counts them."""
        for _, decision in placed:
            self.framework.forget(decision, cluster.snapshot)
        report.deferred += len(placed)
        report.over_deadline = True
        logger.info(
            "cycle past its %.1f s deadline: %d placements left for the next",
            self.deadline_s,
            len(placed),
        )

    def _quarantine(self) -> dict[str, str]:
        """The nodes the scheduler cannot trust now, recorded when that changes."""
        quarantined = self.cache.state().quarantined
        if quarantined != self._quarantined:
            services.nodes_quarantine(reasons=quarantined)
            self._quarantined = dict(quarantined)
        return quarantined

    # --- 3. admission ---------------------------------------------------------------------------

    def _admission(self) -> Admission:
        return Admission(
            self.side,
            self._evictions(),
            self.load_feed,
            self.pods_ready,
            self.batch_size,
            self._empty_cluster,
            self.starving_after_s,
        )

    def _empty_cluster(self) -> EmptyClusterFeasibility | None:
        """What could ever run where; None before any node is known (nothing to judge by: a
        workload admitted then is released by the pods-ready timeout if no node comes)."""
        cluster = self.cache.state()
        if not cluster.snapshot.nodes:
            return None
        if self._feasibility is None or self._feasibility[0] is not cluster.snapshot.nodes:
            self._feasibility = (
                cluster.snapshot.nodes,
                EmptyClusterFeasibility(
                    self.framework, cluster.snapshot.nodes, cluster.quarantined
                ),
            )
        return self._feasibility[1]

    # --- 8. evictions (and what admission and reclaim evict) ---------------------------------

    def _evictions(self) -> Evictions:
        return Evictions(self.side, self.cache)

    # --- 4. reclaim -----------------------------------------------------------------------------

    def _reclaim(self, now: datetime, report: CycleReport) -> int:
        """Returns how many workloads were evicted from lent capacity."""
        cluster = self.cache.state()
        victims = self.reclaim_feed.refresh(cluster, now)
        if not victims:
            return 0
        reason_of = {v.pod.uid: reclaimed_reason(v.gpu_name, v.reason) for v in victims}
        pods = Pod.objects.filter(uid__in=list(reason_of)).select_related("workload__tenant")
        by_workload = {pod.workload_id: (pod.workload, reason_of[str(pod.uid)]) for pod in pods}
        evicted = 0
        for workload, reason in by_workload.values():
            evicted += len(self._evictions().workloads([workload], reason, None, now, report))
        return evicted

    # --- 7. reservations and backfill -----------------------------------------------------------

    def _backfill(
        self,
        cluster: ClusterState,
        batch: Sequence[PodRequest],
        now: datetime,
        by_uid: dict[str, Pod],
    ) -> BackfillPolicy:
        """Predicted ends of what the nodes hold and run times of what waits, learnt from
        finished workloads (scheduling.worker.runtime_feed); reservations in the fair-share
        order."""
        keys = {held.pod.workload for held in cluster.snapshot.pods.held.values()}
        keys |= {pod.workload for pod in batch}
        self.runtime_feed.refresh(sorted(k for k in keys if k))
        at = now.timestamp()
        return BackfillPolicy(
            now=at,
            ends_at=self.runtime_feed.ends_at(at),
            runtime_s=self.runtime_feed.runtime_s(at),
            book=self.reservations,
            horizon_s=self.reservation_horizon_s,
            fair_order=_fair_order(by_uid),
            starving_after_s=self.starving_after_s,
        )

    def _report_released(
        self, released: Sequence[ReleasedReservation], by_uid: dict[str, Pod], now: datetime
    ) -> int:
        """Reservations given up (they could not complete within the horizon): an event each,
        with the reason."""
        if not released:
            return 0
        workloads: dict[str, Workload] = {}
        for pod in by_uid.values():
            request_gang = f"{pod.workload_id}/{pod.pod_set}"
            for key in (request_gang, str(pod.uid)):
                workloads.setdefault(key, pod.workload)
        services.reservations_released(
            released=[
                (workloads[r.key], r.nodes, r.reason) for r in released if r.key in workloads
            ],
            now=now,
        )
        return len(released)

    # --- 9-10. commit and bind ------------------------------------------------------------------

    def _commit(
        self,
        cluster: ClusterState,
        placed: list[tuple[Pod, Decision]],
        report: CycleReport,
        now: datetime,
        *,
        all_or_nothing: bool = False,
    ) -> _InFlight:
        """Commit in the database, then start making real on the side; what the database
        refuses is forgotten at once (the seeds' Unreserve)."""
        if not placed:
            return _InFlight(placed, Answered(), set())
        result = services.placements_commit(
            cluster=cluster,
            placed=placed,
            scheduler=self.identity,
            now=now,
            all_or_nothing=all_or_nothing,
        )
        refused = {pod.pk for pod, _ in result.conflicts}
        committed = [(pod, d) for pod, d in placed if pod.pk not in refused]
        for pod, reason in result.conflicts:
            logger.warning("bind of %s refused: %s", pod.name, reason)
        report.conflicts += len(result.conflicts)
        for pod, decision in placed:
            if pod.pk in refused:
                self.framework.forget(decision, cluster.snapshot)
            elif decision.placement is not None:
                self.cache.bound(decision.pod, decision.placement)  # until the side refuses it
        return _InFlight(committed, self.side.bind(committed, now), refused)

    def _answered(self, binding: _InFlight, report: CycleReport) -> bool:
        """What the side refused went back to the queue (the side's `wait`). True when
        everything was bound (the database refused nothing of it either)."""
        rejected = binding.binding.wait()
        report.conflicts += sum(r.conflict for r in rejected)
        report.requeued += len(rejected)
        report.bound += len(binding.committed) - len(rejected)
        gone = {r.pod.pk for r in rejected}
        for pod, decision in binding.committed:
            if pod.pk in gone and (held := self.cache.unbind(decision.pod.uid)) is not None:
                self.framework.forget(decision, held.snapshot)
        return not gone and not binding.refused

    # --- 11. reasons ----------------------------------------------------------------------------

    def _record_workload_reasons(self, failed: list[tuple[Pod, Decision]]) -> None:
        """An admitted workload whose pods wait says why: the root cause (no node fits, or no
        node offers the topology) before WaitingForGang."""
        rank = {
            queue_admission.TOPOLOGY_PLACEMENT_FAILED: 0,
            queue_admission.NO_FIT: 1,
            queue_admission.WAITING_FOR_GANG: 2,
        }
        best: dict[int, tuple[Workload, str, str]] = {}
        for pod, decision in failed:
            code, message = classify(decision)
            current = best.get(pod.workload_id)
            if current is None or rank.get(code, 3) < rank.get(current[1], 3):
                best[pod.workload_id] = (pod.workload, code, message)
        services.workloads_waiting(updates=list(best.values()))


@dataclass(frozen=True)
class _InFlight:
    """A chunk committed in the database, which the side is making real."""

    committed: list[tuple[Pod, Decision]]
    binding: Binding
    refused: set[int]  # pks of the pods the database refused


def _fair_order(by_uid: dict[str, Pod]) -> FairOrder:
    """Each batch pod's ClusterQueue and the queues' dominant shares (DRS) now: reservations
    follow the order fair sharing serves the queues in (scheduling.core.queueing.backfill)."""
    queue_of_workload = dict(
        Workload.objects.filter(pk__in={pod.workload_id for pod in by_uid.values()}).values_list(
            "pk", "cluster_queue__name"
        )
    )
    queues = {uid: queue_of_workload.get(pod.workload_id) or "" for uid, pod in by_uid.items()}
    book = queue_state.quota_book(queue_state.queue_setup(), queue_state.admitted_workloads())
    share = {name: float(book.dominant_resource_share(name)[0]) for name in book.queues}
    return FairOrder(lambda pod: queues.get(pod.uid, ""), share)
