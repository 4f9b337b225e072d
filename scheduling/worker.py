"""The scheduling loop as small steps: `run_once()` does one cycle and says whether more work is
waiting, so tests call it directly and the command only loops and sleeps.

One cycle: (1) lead or stand by, (2) on becoming leader reconcile, (3) admit workloads: an
admission cycle over the cluster queues (quota, flavors, fair sharing, quota preemption; without any
cluster queue everything is admitted), deactivated workloads and drained queues evicted, (4) take
a batch of pending pods with whole gangs, (5) snapshot the cluster, (6) schedule the batch into the
snapshot: gangs all or nothing, and a pod that fits nowhere may preempt (PostFilter) - its victims'
workloads are evicted and requeued at once, (7) bind the placed pods in batched transactions, each
gang in one, (8) record why the others wait, per pod and per workload (NoFit,
TopologyPlacementFailed, WaitingForGang)."""

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

from django.utils import timezone

from scheduling import fair_sharing, selectors, services
from scheduling.cache import ClusterCache
from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.batch import classify, schedule_batch
from scheduling.core.queueing.gang_reclaim import gang_victims
from scheduling.core.queueing.preemption import may_preempt
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest, ServiceClass
from scheduling.load_feed import LoadFeed
from scheduling.models import Pod, Workload
from scheduling.reclaim import ReclaimFeed

logger = logging.getLogger(__name__)

LEASE_NAME = "gpusched-scheduler"


@dataclass
class CycleReport:
    leading: bool = False
    attempted: int = 0
    bound: int = 0
    conflicts: int = 0
    unschedulable: int = 0
    admitted: int = 0
    preempted: int = 0  # workloads evicted to make room (quota or nodes)
    reclaimed: int = 0  # workloads evicted from lent capacity their owners took back
    gangs_bound: int = 0
    reconciled: int = 0
    more: bool = False
    admission_s: float = 0.0
    snapshot_s: float = 0.0
    schedule_s: float = 0.0
    commit_s: float = 0.0


@dataclass
class SchedulerWorker:
    framework: Framework
    identity: str = field(
        default_factory=lambda: f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    )
    batch_size: int = 500
    commit_size: int = 250
    lease_duration_s: float = 15.0
    lease_name: str = LEASE_NAME
    clock: Callable[[], datetime] = timezone.now
    leading: bool = False
    cache: ClusterCache = field(default_factory=ClusterCache)
    load_feed: LoadFeed = field(default_factory=LoadFeed)
    reclaim_feed: ReclaimFeed = field(default_factory=ReclaimFeed)

    def __post_init__(self) -> None:
        # Preemption judges "fits after eviction" with the profile's own filters.
        for _, plugin in self.framework.post_filter:
            use_filters = getattr(plugin, "use_filters", None)
            if use_filters is not None:
                use_filters(self.framework.filter)

    def run_once(self) -> CycleReport:
        try:
            return self._cycle()
        except Exception:
            # Whatever the snapshot assumed in this cycle may not be committed: start afresh.
            self.cache.invalidate()
            raise

    def _cycle(self) -> CycleReport:
        report = CycleReport()
        now = self.clock()

        # 1. Lead, or stand by: only the lease holder schedules.
        if not services.lease_acquire(
            name=self.lease_name, holder=self.identity, duration_s=self.lease_duration_s, now=now
        ):
            self.leading = False
            return report
        report.leading = True

        # 2. On becoming leader, reconcile what a crashed predecessor left: expired reservations go
        # back to the pool; bound pods stay bound.
        if not self.leading:
            report.reconciled = services.reservations_expire(now=now)
            self.cache.invalidate()
            self.leading = True

        # 3. Admission: quota reserved in a cluster queue, victims evicted.
        started = time.perf_counter()
        report.admitted, report.preempted = self._admit(now)
        report.admission_s = time.perf_counter() - started

        # 4. Reclaim: what idle owners may lend, and the lent pods whose owners use it again.
        report.reclaimed = self._reclaim(now)

        # 5. The next batch of pending pods, in the profile's queue order, with whole gangs.
        pods = selectors.with_gang_members(selectors.pending_pods(now, self.batch_size))
        if not pods:
            return report
        requests = {pod.pk: self.load_feed.estimate(selectors.pod_request(pod)) for pod in pods}
        if self.framework.queue_sort is not None:
            less = self.framework.queue_sort.less
            pods.sort(
                key=cmp_to_key(lambda a, b: -1 if less(requests[a.pk], requests[b.pk]) else 1)
            )

        # 6. Snapshot: nodes, GPUs and every active allocation, brought up to date from the outbox.
        started = time.perf_counter()
        cluster = self.cache.state()
        self.load_feed.refresh(cluster, now)
        report.snapshot_s = time.perf_counter() - started

        # 7. Schedule the batch into the snapshot: gangs all or nothing, preemption when nothing
        # fits.
        by_uid = {requests[pod.pk].uid: pod for pod in pods}
        evicted: set[int] = set()

        def preempt(decision: Decision) -> Decision | None:
            return self._preempt(decision, cluster, by_uid[decision.pod.uid], evicted, report, now)

        def reclaim_gang(members: Sequence[PodRequest]) -> bool:
            return self._reclaim_gang(members, cluster, by_uid, evicted, report, now)

        started = time.perf_counter()
        outcome = schedule_batch(
            self.framework,
            cluster.snapshot,
            [requests[pod.pk] for pod in pods],
            preempt=preempt,
            reclaim_gang=reclaim_gang,
        )
        report.schedule_s = time.perf_counter() - started
        placed: list[tuple[Pod, Decision]] = []
        for decision in outcome.placed:
            pod = by_uid[decision.pod.uid]
            if pod.workload_id in evicted:  # its workload was just preempted: it waits again
                self.framework.forget(decision, cluster.snapshot)
            else:
                placed.append((pod, decision))
        gangs: list[list[tuple[Pod, Decision]]] = []
        for group in outcome.gangs:
            members = [(by_uid[d.pod.uid], d) for d in group]
            if any(pod.workload_id in evicted for pod, _ in members):
                for _, decision in reversed(members):
                    self.framework.forget(decision, cluster.snapshot)
            else:
                gangs.append(members)

        # 8. Bind: single pods in chunks (per-pod fallback on conflict), each gang in one go.
        for k in range(0, len(placed), self.commit_size):
            self._commit(cluster, placed[k : k + self.commit_size], report, now)
        for members in gangs:
            if self._commit(cluster, members, report, now, all_or_nothing=True):
                report.gangs_bound += 1

        # An online share just placed beside lent pods gets its GPU to itself within this cycle.
        if any(_online_beside_lent(cluster.snapshot, decision) for _, decision in placed):
            report.reclaimed += self._reclaim(now, force=True)

        # 9. Why the others wait: per pod (backoff, decision record) and per workload.
        failed = [(by_uid[d.pod.uid], d) for d in outcome.failed]
        failed = [(pod, d) for pod, d in failed if pod.workload_id not in evicted]
        started = time.perf_counter()
        services.pods_unschedulable(failed=failed, now=now)
        self._record_workload_reasons(failed)
        report.commit_s += time.perf_counter() - started
        report.attempted = len(pods)
        report.unschedulable = len(failed)
        report.more = len(pods) >= self.batch_size
        return report

    def _reclaim(self, now: datetime, *, force: bool = False) -> int:
        """Phase 4. Returns how many workloads were evicted from lent capacity."""
        cluster = self.cache.state()
        victims = self.reclaim_feed.refresh(cluster, now, force=force)
        if not victims:
            return 0
        reason_of = {v.pod.uid: f"Reclaimed: GPU {v.gpu_name}: {v.reason}" for v in victims}
        pods = Pod.objects.filter(uid__in=list(reason_of)).select_related("workload")
        by_workload = {pod.workload_id: (pod.workload, reason_of[str(pod.uid)]) for pod in pods}
        for workload, reason in by_workload.values():
            self._evict(cluster, [workload], reason, None, set(), now)
        return len(by_workload)

    def _admit(self, now: datetime) -> tuple[int, int]:
        """Phase 3. Returns (workloads admitted, workloads evicted for them or by deactivation)."""
        # Admission fair sharing: LocalQueue usage history moves on Kueue's sampling interval.
        fair_sharing.local_queue_usage_sample(now=now)
        setup = selectors.queue_setup()
        if not setup.managed:
            return self._admit_without_queues(now)
        queued = selectors.queued_workloads(setup)
        rows = {str(w.pk): w for w, _ in queued}
        result = admission_cycle(
            list(setup.cluster_queues.values()),
            setup.flavors,
            [q for _, q in queued if q is not None],
            selectors.admitted_workloads(self.load_feed.usage_ratios()),
            local_queues=list(setup.local_queues.values()),
            cohorts=list(setup.cohorts.values()),
            fair_usage=setup.fair_usage,
            limit=self.batch_size,
            idle_weight=selectors.fair_share_idle_weight(),
        )
        evicted = self._evict_intents(result.evictions, now)
        victims = {
            w.pk: w
            for w in Workload.objects.filter(
                pk__in=[int(v) for v, _ in result.victims]
            ).select_related("tenant")
        }
        admissions = []
        for a in result.admitted:
            chosen = sorted(set(a.assignment.flavors.values()))
            admissions.append(
                services.WorkloadAdmission(
                    workload=rows[a.workload.key],
                    cluster_queue=setup.rows[a.workload.cluster_queue],
                    flavors=dict(a.assignment.flavors),
                    quota_usage={
                        selectors.usage_key(fr): amount for fr, amount in a.assignment.usage.items()
                    },
                    node_selector=a.assignment.node_selector(setup.flavors),
                    tolerations=[
                        services.toleration_json(t)
                        for name in chosen
                        for t in setup.flavors[name].tolerations
                    ],
                    victims=tuple(victims[int(v)] for v in a.victims if int(v) in victims),
                )
            )
        admitted = services.queue_admit(admissions=admissions, now=now)
        updates = [
            (rows[key], waiting.reason, waiting.message) for key, waiting in result.waiting.items()
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
        services.workloads_waiting(updates=updates)
        return admitted, len(victims) + evicted

    def _admit_without_queues(self, now: datetime) -> tuple[int, int]:
        """No cluster queue: every active workload is admitted as it comes; deactivated ones are
        evicted and wait."""
        inactive = Workload.objects.filter(
            active=False, state__in=(Workload.State.ADMITTED, Workload.State.RUNNING)
        ).select_related("tenant")
        evicted = self._evict_intents(
            [
                queue_admission.Eviction(
                    str(w.pk), queue_admission.INACTIVE_WORKLOAD, "the workload is deactivated"
                )
                for w in inactive
            ],
            now,
        )
        pending = Workload.objects.filter(state=Workload.State.PENDING, active=True)
        admitted = services.workloads_admit(
            workloads=pending.select_related("tenant")[: self.batch_size], now=now
        )
        return admitted, evicted

    def _evict_intents(self, evictions: Sequence[queue_admission.Eviction], now: datetime) -> int:
        """Carry out the admission cycle's evictions (deactivated workloads, drained queues):
        quota and pods released, the workloads back to Pending with Kueue's reason."""
        if not evictions:
            return 0
        rows = Workload.objects.in_bulk([int(e.key) for e in evictions])
        cluster = self.cache.state()
        for eviction in evictions:
            workload = rows.get(int(eviction.key))
            if workload is not None:
                self._evict(
                    cluster, [workload], eviction.message, None, set(), now, eviction.reason
                )
        return len(evictions)

    def _preempt(
        self,
        decision: Decision,
        cluster: selectors.ClusterState,
        pod: Pod,
        evicted: set[int],
        report: CycleReport,
        now: datetime,
    ) -> Decision | None:
        """PostFilter nominated victims: evict their workloads (requeued, with events), forget
        their pods from the snapshot, and try the pod again."""
        nomination = decision.nomination
        if nomination is None or pod.workload.preemption_policy == "Never":
            return None
        if any(uid not in cluster.held for uid in nomination.victims):
            return None  # placed in this very cycle and not bound yet: wait for the next one
        victims = list(
            Workload.objects.filter(pods__uid__in=list(nomination.victims))
            .distinct()
            .select_related("tenant")
        )
        if not victims:
            return None
        workload = pod.workload
        reason = (
            f"Preempted by {workload.tenant.name}/{workload.name} ({workload.service_class}, "
            f"priority {pod.priority}) on node {nomination.nominated_node}"
        )
        self._evict(cluster, victims, reason, workload, evicted, now)
        report.preempted += len(victims)
        logger.info(
            "%s preempted %d workload(s) on %s", pod.name, len(victims), nomination.nominated_node
        )
        return self.framework.schedule_one(decision.pod, cluster.snapshot)

    def _reclaim_gang(
        self,
        members: Sequence[PodRequest],
        cluster: selectors.ClusterState,
        by_uid: dict[str, Pod],
        evicted: set[int],
        report: CycleReport,
        now: datetime,
    ) -> bool:
        """Topology-aware reclaim: an admitted gang whose cluster queue is within its nominal
        quota, and may reclaim, evicts the fewest pods of workloads whose queues borrow from its
        cohort such that all its members fit (scheduling.core.queueing.gang_reclaim)."""
        workload = by_uid[members[0].uid].workload
        own = workload.cluster_queue
        if own is None or not own.cohort or own.reclaim_within_cohort == "Never":
            return False
        setup = selectors.queue_setup()
        book = selectors.quota_book(setup, selectors.admitted_workloads())
        if own.name not in book.queues or book.is_borrowing(own.name):
            return False
        borrowing = {
            name for name in book.members(own.name) if name != own.name and book.is_borrowing(name)
        }
        if not borrowing:
            return False
        owners = {
            str(uid): (wid, queue or "", priority, klass, created)
            for uid, wid, queue, priority, klass, created in Pod.objects.filter(
                uid__in=list(cluster.held), workload__cluster_queue__name__in=borrowing
            ).values_list(
                "uid",
                "workload_id",
                "workload__cluster_queue__name",
                "workload__priority",
                "workload__service_class",
                "workload__created_at",
            )
        }

        def evictable(held: HeldPod) -> bool:
            owner = owners.get(held.pod.uid)
            return owner is not None and may_preempt(
                preemptor_class=ServiceClass(workload.service_class),
                preemptor_priority=workload.priority,
                preemptor_created=workload.created_at.timestamp(),
                victim_class=ServiceClass(owner[3]),
                victim_priority=owner[2],
                victim_created=owner[4].timestamp(),
                rule=own.reclaim_within_cohort,
            )

        victims = gang_victims(self.framework, cluster.snapshot, members, evictable)
        if not victims:
            return False
        rows = list(
            Workload.objects.filter(pk__in={owners[v.pod.uid][0] for v in victims}).select_related(
                "tenant"
            )
        )
        reason = (
            f"Preempted to make room for gang {workload.tenant.name}/{workload.name} "
            f"(reclaim within cohort {own.cohort})"
        )
        self._evict(cluster, rows, reason, workload, evicted, now)
        report.preempted += len(rows)
        return True

    def _evict(
        self,
        cluster: selectors.ClusterState,
        victims: list[Workload],
        reason: str,
        preemptor: Workload | None,
        evicted: set[int],
        now: datetime,
        pending_reason: str = queue_admission.PREEMPTED,
    ) -> None:
        """Evict the victims' workloads (requeued, with events) and forget their pods from the
        snapshot, so the rest of the cycle sees the freed capacity; lent shares the release moved
        onto free capacity (services._promote_lent) are caught up too."""
        released = services.workloads_evict(
            workloads=victims,
            reason=reason,
            now=now,
            preemptor=preemptor,
            pending_reason=pending_reason,
        )
        for uid in released:
            held = cluster.held.pop(uid, None)
            if held is not None:
                cluster.snapshot.forget(*held)
        self.cache.catch_up()
        evicted.update(w.pk for w in victims)

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

    def _commit(
        self,
        cluster: selectors.ClusterState,
        placed: list[tuple[Pod, Decision]],
        report: CycleReport,
        now: datetime,
        *,
        all_or_nothing: bool = False,
    ) -> bool:
        """Bind; whatever the database refuses is forgotten. True when everything was bound."""
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
        report.commit_s += time.perf_counter() - started
        report.bound += len(result.bound)
        report.conflicts += len(result.conflicts)
        refused = {pod.pk for pod, _ in result.conflicts}
        for pod, decision in placed:
            if pod.pk in refused:
                # The seeds' Unreserve: the database refused the bind, so the snapshot forgets it.
                self.framework.forget(decision, cluster.snapshot)
            elif decision.placement is not None:
                self.cache.bound(decision.pod, decision.placement)
        for pod, reason in result.conflicts:
            logger.warning("bind of %s refused: %s", pod.name, reason)
        return not result.conflicts

    def stand_down(self) -> None:
        services.lease_release(name=self.lease_name, holder=self.identity)
        self.leading = False


def _online_beside_lent(snapshot: ClusterSnapshot, decision: Decision) -> bool:
    """An online pod placed on a GPU that lends part of itself to opportunistic pods."""
    placement = decision.placement
    if placement is None or decision.pod.service_class is not ServiceClass.ONLINE:
        return False
    gpus = list(placement.gpu_indices)
    return bool(snapshot.gpu_lent[snapshot.index[placement.node], gpus].any())
