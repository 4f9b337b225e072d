"""One scheduling cycle for both cluster sides (DESIGN.md §8), written once against the protocol of
scheduling.side. `run_once()` does one cycle and says whether more work is waiting, so tests call
it directly and the commands (`runscheduler`, `runkube`) only loop and sleep.
Over 600 lines because the numbered phases below are meant to be read top to bottom in one
place, as kube-scheduler's schedule_one.go is; what each phase calls is in the core and services.

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
    preemption and gang reclaim return eviction intents; nothing is written meanwhile.
 8. Evict on the side, then commit what it accepted. The side is asked first because it may
    refuse (a disruption budget), and a refused eviction must leave no trace in the database.
 9. Commit the placements in the database: its constraints refuse any over-commit.
10. Make them real on the side (Kubernetes: Bindings); what the cluster refuses goes back to the
    queue.
11. Report why the others wait: per pod, per workload, and to the side.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import cmp_to_key

from django.conf import settings
from django.utils import timezone

from scheduling import cluster_state, queue_state, services
from scheduling.cache import ClusterCache
from scheduling.cluster_state import ClusterState
from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.backfill import (
    DEFAULT_HORIZON_S,
    BackfillPolicy,
    FairOrder,
    ReleasedReservation,
    ReservationBook,
)
from scheduling.core.queueing.batch import Eviction, classify, schedule_batch
from scheduling.core.queueing.feasibility import EmptyClusterFeasibility
from scheduling.core.queueing.gang_reclaim import gang_victims
from scheduling.core.queueing.pods_ready import WaitForPodsReady
from scheduling.core.queueing.preemption import may_preempt
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import NodeSpec, PodRequest, ServiceClass
from scheduling.estimates import StartEstimator
from scheduling.load_feed import LoadFeed
from scheduling.models import Pod, Workload
from scheduling.reclaim import ReclaimFeed
from scheduling.runtime_feed import RuntimeFeed
from scheduling.side import ClusterSide, Elector, PodEviction, Verdict, Waiting

logger = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


def pods_ready_settings() -> WaitForPodsReady:
    return WaitForPodsReady(
        timeout_s=settings.PODS_READY_TIMEOUT_S,
        backoff_base_s=settings.PODS_READY_BACKOFF_BASE_S,
        backoff_max_s=settings.PODS_READY_BACKOFF_MAX_S,
    )


@dataclass
class CycleReport:
    side: str = ""
    leading: bool = False
    synced: bool = False  # the side's view was complete (Kubernetes: informers listed)
    attempted: int = 0
    bound: int = 0
    conflicts: int = 0  # binds the database refused
    requeued: int = 0  # binds the side refused (the pod goes back to the queue)
    unschedulable: int = 0
    admitted: int = 0
    preempted: int = 0  # workloads evicted to make room (quota or nodes)
    pods_ready_timeouts: int = 0  # admitted workloads evicted: pods not placed in time
    reclaimed: int = 0  # workloads evicted from lent capacity their owners took back
    evictions_refused: int = 0  # pods the side would not evict now (a disruption budget)
    gangs_bound: int = 0
    reserved: int = 0  # gangs and large pods holding nodes they wait for
    reservations_released: int = 0
    estimated: int = 0  # waiting workloads whose start was estimated
    reconciled: int = 0
    reported: int = 0  # reports the side sent out (Kubernetes: events and conditions)
    quarantined: int = 0  # nodes whose recorded state contradicts their capacity
    more: bool = False
    admission_s: float = 0.0
    snapshot_s: float = 0.0
    schedule_s: float = 0.0
    commit_s: float = 0.0
    side_counts: dict[str, int] = field(default_factory=dict)


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
    reservations: ReservationBook = field(default_factory=ReservationBook)
    estimator: StartEstimator = field(default_factory=StartEstimator)
    _quarantined: dict[str, str] | None = field(default=None, init=False, repr=False)
    # Feasibility over the emptied cluster, kept while the nodes it was built from are current
    # (a rebuilt snapshot, or a cordon set or lifted in place, gives a new list of them).
    _feasibility: tuple[list[NodeSpec], EmptyClusterFeasibility] | None = field(
        default=None, init=False, repr=False
    )

    def run_once(self) -> CycleReport:
        try:
            report = self._cycle()
            if report.synced and self.estimator.due():
                report.estimated = self._estimate()
            return report
        except Exception:
            # Whatever the snapshot assumed in this cycle may not be committed: start afresh.
            self.cache.invalidate()
            raise

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
            )
        except Exception:
            logger.exception("estimating starts failed; scheduling goes on")
            return 0

    def stand_down(self) -> None:
        self.elector.stand_down()

    def _cycle(self) -> CycleReport:
        report = CycleReport(side=self.side.name)
        now = self.clock()

        # 1. Lead, or stand by.
        leadership = self.elector.lead(now)
        if not leadership.leading:
            return report
        report.leading = True
        if leadership.new_term:
            report.reconciled = services.reservations_expire(now=now)
            self.cache.invalidate()

        # 2. Sync the side.
        synced = self.side.sync(now)
        report.side_counts = dict(synced.counts)
        if not synced.ready:
            return report  # nothing is decided on a partial view
        report.synced = True
        report.quarantined = len(self._quarantine())

        # 3. Admit.
        started = time.perf_counter()
        report.admitted, report.preempted = self._admit(now, report)
        report.admission_s = time.perf_counter() - started

        # 4. Reclaim.
        report.reclaimed = self._reclaim(now, report)

        # 5. The next batch.
        pods = self.side.placeable(
            cluster_state.with_gang_members(cluster_state.pending_pods(now, self.batch_size))
        )
        if not pods:
            return report
        requests = {pod.pk: self.load_feed.estimate(cluster_state.pod_request(pod)) for pod in pods}
        if self.framework.queue_sort is not None:
            less = self.framework.queue_sort.less
            pods.sort(
                key=cmp_to_key(lambda a, b: -1 if less(requests[a.pk], requests[b.pk]) else 1)
            )

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
            reclaim_gang=lambda members: self._gang_reclaim(members, cluster, by_uid),
            backfill=self._backfill(cluster, list(requests.values()), now, by_uid),
        )
        report.schedule_s = time.perf_counter() - started
        report.reserved = len(outcome.reservations)
        report.reservations_released = self._report_released(outcome.released, by_uid, now)

        # 8. Evictions: asked of the side, then committed.
        report.preempted += self._carry_out(outcome.evictions, cluster, by_uid, now, report)
        placed = [(by_uid[d.pod.uid], d) for d in outcome.placed]
        gangs = [[(by_uid[d.pod.uid], d) for d in group] for group in outcome.gangs]

        # 9-10. Commit, then make real: single pods in chunks, each gang in one go.
        for k in range(0, len(placed), self.commit_size):
            self._commit(cluster, placed[k : k + self.commit_size], report, now)
        for members in gangs:
            if self._commit(cluster, members, report, now, all_or_nothing=True):
                report.gangs_bound += 1
        # An online share just placed beside lent pods gets its GPU to itself within this cycle.
        if any(_online_beside_lent(cluster.snapshot, decision) for _, decision in placed):
            report.reclaimed += self._reclaim(now, report, force=True)

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
        report.commit_s += time.perf_counter() - started
        report.attempted = len(pods)
        report.unschedulable = len(failed)
        report.more = len(pods) >= self.batch_size
        return report

    def _quarantine(self) -> dict[str, str]:
        """The nodes the scheduler cannot trust now, recorded when that changes."""
        quarantined = self.cache.state().quarantined
        if quarantined != self._quarantined:
            services.nodes_quarantine(reasons=quarantined)
            self._quarantined = dict(quarantined)
        return quarantined

    # --- 3. admission ---------------------------------------------------------------------------

    def _admit(self, now: datetime, report: CycleReport) -> tuple[int, int]:
        """Returns (workloads admitted, workloads evicted for them or by deactivation)."""
        if not self.side.queues_admit:  # admitted in the cluster already (beside Kueue)
            return self._admit_without_queues(now, report)
        # Admission fair sharing: LocalQueue usage history moves on Kueue's sampling interval.
        services.local_queue_usage_sample(now=now)
        setup = queue_state.queue_setup()
        if not setup.managed:
            return self._admit_without_queues(now, report)
        report.pods_ready_timeouts = self._pods_ready_timeouts(now, report)
        queued = queue_state.queued_workloads(setup)
        rows = {str(w.pk): w for w, _ in queued}
        result = admission_cycle(
            list(setup.cluster_queues.values()),
            setup.flavors,
            [q for _, q in queued if q is not None],
            queue_state.admitted_workloads(self.load_feed.usage_ratios()),
            local_queues=list(setup.local_queues.values()),
            cohorts=list(setup.cohorts.values()),
            fair_usage=setup.fair_usage,
            limit=self.batch_size,
            idle_weight=queue_state.fair_share_idle_weight(),
            feasibility=self._empty_cluster(),
            now=now.timestamp(),
        )
        dropped = self._evict_intents(result.evictions, now, report)
        victims = {
            w.pk: w
            for w in Workload.objects.filter(
                pk__in=[int(v) for v, _ in result.victims]
            ).select_related("tenant")
        }
        evicted: set[int] = set()
        admissions = []
        for a in result.admitted:
            target = rows[a.workload.key]
            own = [victims[int(v)] for v in a.victims if int(v) in victims]
            own = [v for v in own if v.pk not in evicted]  # one eviction may make room for two
            if own:
                reason = (
                    f"Preempted to admit {target.tenant.name}/{target.name} "
                    f"(priority {target.priority}) in ClusterQueue {a.workload.cluster_queue}"
                )
                gone = self._evict_workloads(own, reason, target, now, report)
                evicted |= gone
                if len(gone) < len(own):
                    # A victim the side would not let go, or one not holding quota any more (the
                    # cycle's view was stale): its room is not free, the workload waits.
                    continue
            chosen = sorted(set(a.assignment.flavors.values()))
            admissions.append(
                services.WorkloadAdmission(
                    workload=target,
                    cluster_queue=setup.rows[a.workload.cluster_queue],
                    flavors=dict(a.assignment.flavors),
                    quota_usage={
                        queue_state.usage_key(fr): amount
                        for fr, amount in a.assignment.usage.items()
                    },
                    node_selector=a.assignment.node_selector(setup.flavors),
                    tolerations=[
                        services.toleration_json(t)
                        for name in chosen
                        for t in setup.flavors[name].tolerations
                    ],
                )
            )
        admitted = services.queue_admit(admissions=admissions, now=now)
        # Where each waiting workload stands in its ClusterQueue (the cycle's own order).
        standing: dict[str, list[str]] = defaultdict(list)
        for _, q in queued:
            if q is not None and q.key in result.waiting:
                standing[q.cluster_queue].append(q.key)
        where = {
            key: f"ClusterQueue {cq}, position {k} of {len(keys)}"
            for cq, keys in standing.items()
            for k, key in enumerate(keys, start=1)
        }
        updates = [
            (rows[key], waiting.reason, f"{waiting.message} ({where[key]})")
            for key, waiting in result.waiting.items()
        ]
        updates += [
            (
                w,
                queue_admission.INADMISSIBLE,
                f"LocalQueue {w.tenant.namespace}/{w.queue_name} does not exist",
            )
            for w, q in queued
            if q is None
        ]
        changed = services.workloads_waiting(updates=updates)
        # Their pods are never tried while their workload waits for quota: they are told why here.
        waiting = Pod.objects.filter(workload__in=changed, phase=Pod.Phase.PENDING).select_related(
            "workload__tenant"
        )
        report.reported += self.side.report(
            [
                Waiting(pod, f"{pod.workload.pending_reason}: {pod.workload.reason}")
                for pod in waiting
            ],
            now,
        )
        return admitted, len(evicted) + dropped

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

    def _pods_ready_timeouts(self, now: datetime, report: CycleReport) -> int:
        """Admitted workloads with pods still waiting for a node past the timeout give their
        quota back and wait out a backoff before they are queued again (Kueue's
        waitForPodsReady with its requeuingStrategy)."""
        if self.pods_ready.timeout_s <= 0:
            return 0
        late = Workload.objects.filter(
            state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
            cluster_queue__isnull=False,
            admitted_at__lte=now - timedelta(seconds=self.pods_ready.timeout_s),
            pods__phase=Pod.Phase.PENDING,
        ).distinct()
        evicted = 0
        for workload in late.select_related("tenant"):
            delay = self.pods_ready.requeue_delay(workload.requeue_count + 1)
            reason = (
                f"pods not all placed within {self.pods_ready.timeout_s:g}s of admission; "
                f"requeued with a backoff of {delay:g}s"
            )
            evicted += len(
                self._evict_workloads(
                    [workload],
                    reason,
                    None,
                    now,
                    report,
                    queue_admission.PODS_READY_TIMEOUT,
                    requeue_at=now + timedelta(seconds=delay),
                )
            )
        return evicted

    def _admit_without_queues(self, now: datetime, report: CycleReport) -> tuple[int, int]:
        """No cluster queue: every active workload is admitted as it comes; deactivated ones are
        evicted and wait."""
        inactive = Workload.objects.filter(
            active=False, state__in=(Workload.State.ADMITTED, Workload.State.RUNNING)
        )
        dropped = self._evict_intents(
            [
                queue_admission.Eviction(
                    str(w.pk), queue_admission.INACTIVE_WORKLOAD, "the workload is deactivated"
                )
                for w in inactive
            ],
            now,
            report,
        )
        pending = Workload.objects.filter(state=Workload.State.PENDING, active=True)
        admitted = services.workloads_admit(
            workloads=pending.select_related("tenant")[: self.batch_size], now=now
        )
        return admitted, dropped

    def _evict_intents(
        self, evictions: Sequence[queue_admission.Eviction], now: datetime, report: CycleReport
    ) -> int:
        """Admitted workloads that must give their quota back (deactivated, or in a queue stopped
        with HoldAndDrain), evicted through the side with Kueue's reason."""
        rows = Workload.objects.select_related("tenant").in_bulk([int(e.key) for e in evictions])
        evicted = 0
        for eviction in evictions:
            workload = rows.get(int(eviction.key))
            if workload is not None:
                evicted += len(
                    self._evict_workloads(
                        [workload], eviction.message, None, now, report, eviction.reason
                    )
                )
        return evicted

    # --- 4. reclaim -----------------------------------------------------------------------------

    def _reclaim(self, now: datetime, report: CycleReport, *, force: bool = False) -> int:
        """Returns how many workloads were evicted from lent capacity."""
        cluster = self.cache.state()
        victims = self.reclaim_feed.refresh(cluster, now, force=force)
        if not victims:
            return 0
        reason_of = {v.pod.uid: f"Reclaimed: GPU {v.gpu_name}: {v.reason}" for v in victims}
        pods = Pod.objects.filter(uid__in=list(reason_of)).select_related("workload__tenant")
        by_workload = {pod.workload_id: (pod.workload, reason_of[str(pod.uid)]) for pod in pods}
        evicted = 0
        for workload, reason in by_workload.values():
            evicted += len(self._evict_workloads([workload], reason, None, now, report))
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
        finished workloads (scheduling.runtime_feed); reservations in the fair-share order."""
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

    # --- 7. gang reclaim (reads only) -----------------------------------------------------------

    def _gang_reclaim(
        self, members: Sequence[PodRequest], cluster: ClusterState, by_uid: dict[str, Pod]
    ) -> Eviction | None:
        """Topology-aware reclaim: an admitted gang whose cluster queue is within its nominal
        quota, and may reclaim, may evict the fewest pods of workloads whose queues borrow from
        its cohort such that all its members fit (scheduling.core.queueing.gang_reclaim)."""
        workload = by_uid[members[0].uid].workload
        own = workload.cluster_queue
        if own is None or not own.cohort or own.reclaim_within_cohort == "Never":
            return None
        setup = queue_state.queue_setup()
        book = queue_state.quota_book(setup, queue_state.admitted_workloads())
        if own.name not in book.queues or book.is_borrowing(own.name):
            return None
        borrowing = {
            name for name in book.members(own.name) if name != own.name and book.is_borrowing(name)
        }
        if not borrowing:
            return None
        owners = {
            str(uid): (priority, klass, created)
            for uid, priority, klass, created in Pod.objects.filter(
                uid__in=list(cluster.held), workload__cluster_queue__name__in=borrowing
            ).values_list(
                "uid", "workload__priority", "workload__service_class", "workload__created_at"
            )
        }

        def evictable(held: HeldPod) -> bool:
            owner = owners.get(held.pod.uid)
            return owner is not None and may_preempt(
                preemptor_class=ServiceClass(workload.service_class),
                preemptor_priority=workload.priority,
                preemptor_created=workload.created_at.timestamp(),
                victim_class=ServiceClass(owner[1]),
                victim_priority=owner[0],
                victim_created=owner[2].timestamp(),
                rule=own.reclaim_within_cohort,
            )

        victims = gang_victims(self.framework, cluster.snapshot, members, evictable)
        if not victims:
            return None
        whole: dict[str, HeldPod] = {}
        for victim in victims:
            for member in [victim, *cluster.snapshot.pods.workload_members(victim.pod.workload)]:
                whole.setdefault(member.pod.uid, member)
        reason = (
            f"Preempted to make room for gang {workload.tenant.name}/{workload.name} "
            f"(reclaim within cohort {own.cohort})"
        )
        return Eviction(tuple(sorted(whole.values(), key=lambda h: h.sequence)), reason, members[0])

    # --- 8. evictions ---------------------------------------------------------------------------

    def _carry_out(
        self,
        intents: Sequence[Eviction],
        cluster: ClusterState,
        by_uid: dict[str, Pod],
        now: datetime,
        report: CycleReport,
    ) -> int:
        """The batch's eviction intents. Where evicted pods are gone at once the batch forgot the
        victims in the snapshot already (and placed pods in their room), so they are no longer
        held; where they terminate first, they still hold everything and the preemptors wait
        (a side that frees at once never refuses, so no placement relies on a refusal)."""
        evicted = 0
        for intent in intents:
            for victim in intent.victims:
                if victim.pod.uid not in cluster.snapshot.pods:
                    cluster.held.pop(victim.pod.uid, None)
            workloads = list(
                Workload.objects.filter(pods__uid__in=[v.pod.uid for v in intent.victims])
                .distinct()
                .select_related("tenant")
            )
            preemptor = (
                by_uid[intent.preemptor.uid].workload
                if intent.preemptor is not None and intent.preemptor.uid in by_uid
                else None
            )
            evicted += len(self._evict_workloads(workloads, intent.reason, preemptor, now, report))
        return evicted

    def _evict_workloads(
        self,
        workloads: Sequence[Workload],
        reason: str,
        preemptor: Workload | None,
        now: datetime,
        report: CycleReport,
        pending_reason: str = queue_admission.PREEMPTED,
        requeue_at: datetime | None = None,
    ) -> set[int]:
        """Evict whole workloads: every placed pod through the side, then, in the database, the
        workloads whose pods the side let go (a workload with a pod the side refused keeps all
        of it: evicted whole or not at all). Returns the ids of those evicted."""
        if not workloads:
            return set()
        pods = list(
            Pod.objects.filter(workload__in=workloads, phase__in=Pod.PLACED_PHASES)
            .select_related("workload__tenant")
            .order_by("id")
        )
        preemptor_pod = preemptor.pods.first() if preemptor is not None else None
        verdicts = self.side.evict([PodEviction(p, reason, preemptor_pod) for p in pods], now)
        refused = {uid for uid, verdict in verdicts.items() if verdict is Verdict.REFUSED}
        report.evictions_refused += len(refused)
        blocked = {p.workload_id for p in pods if str(p.uid) in refused}
        going = [w for w in workloads if w.pk not in blocked]
        if not going:
            return set()
        terminating = frozenset(
            uid for uid, verdict in verdicts.items() if verdict is Verdict.TERMINATING
        )
        evicted = services.workloads_evict(
            workloads=going,
            reason=reason,
            now=now,
            preemptor=preemptor,
            terminating=terminating,
            pending_reason=pending_reason,
            requeue_at=requeue_at,
        )
        # The releases are in the outbox: the snapshot forgets what it still held of them.
        self.cache.catch_up()
        for workload in going:
            if workload.pk in evicted:
                logger.info("evicted %s/%s: %s", workload.tenant.name, workload.name, reason)
        return evicted

    # --- 9-10. commit and bind ------------------------------------------------------------------

    def _commit(
        self,
        cluster: ClusterState,
        placed: list[tuple[Pod, Decision]],
        report: CycleReport,
        now: datetime,
        *,
        all_or_nothing: bool = False,
    ) -> bool:
        """Commit in the database, then make real on the side; whatever either refuses is
        forgotten (the seeds' Unreserve). True when everything was bound."""
        if not placed:
            return True
        started = time.perf_counter()
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
        rejected = self.side.bind(committed, now)
        report.commit_s += time.perf_counter() - started
        report.conflicts += len(result.conflicts) + sum(r.conflict for r in rejected)
        report.requeued += len(rejected)
        report.bound += len(committed) - len(rejected)
        gone = refused | {r.pod.pk for r in rejected}
        for pod, decision in placed:
            if pod.pk in gone:
                self.framework.forget(decision, cluster.snapshot)
            elif decision.placement is not None:
                self.cache.bound(decision.pod, decision.placement)
        return not gone

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


def _online_beside_lent(snapshot: ClusterSnapshot, decision: Decision) -> bool:
    """An online pod placed on a GPU that lends part of itself to opportunistic pods."""
    placement = decision.placement
    if placement is None or decision.pod.service_class is not ServiceClass.ONLINE:
        return False
    gpus = list(placement.gpu_indices)
    return bool(snapshot.gpu_lent[snapshot.index[placement.node], gpus].any())


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
