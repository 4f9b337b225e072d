"""The scheduling loop as small steps: `run_once()` does one cycle and says whether more work is
waiting, so tests call it directly and the command only loops and sleeps.

One cycle: (1) lead or stand by, (2) on becoming leader reconcile, (3) admit workloads, (4) take a
batch of pending pods, (5) snapshot the cluster, (6) schedule each pod into the snapshot, (7) bind
the placed pods in batched transactions, (8) record why the others wait."""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cmp_to_key

from django.utils import timezone

from scheduling import selectors, services
from scheduling.cache import ClusterCache
from scheduling.core.scheduler import Decision, Framework
from scheduling.load_feed import LoadFeed
from scheduling.models import Pod, Workload

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
    reconciled: int = 0
    more: bool = False
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

        # 3. Admit workloads (quota checks come with cluster queues; until then, all are admitted).
        pending = Workload.objects.filter(state=Workload.State.PENDING).select_related("tenant")
        report.admitted = services.workloads_admit(workloads=pending[: self.batch_size], now=now)

        # 4. The next batch of pending pods, in the profile's queue order.
        pods = selectors.pending_pods(now, self.batch_size)
        if not pods:
            return report
        requests = {pod.pk: self.load_feed.estimate(selectors.pod_request(pod)) for pod in pods}
        if self.framework.queue_sort is not None:
            less = self.framework.queue_sort.less
            pods.sort(
                key=cmp_to_key(lambda a, b: -1 if less(requests[a.pk], requests[b.pk]) else 1)
            )

        # 5. Snapshot: nodes, GPUs and every active allocation, brought up to date from the outbox.
        started = time.perf_counter()
        cluster = self.cache.state()
        self.load_feed.refresh(cluster, now)
        report.snapshot_s = time.perf_counter() - started

        # 6-7. Schedule each pod into the snapshot; bind in chunks as they fill up.
        placed: list[tuple[Pod, Decision]] = []
        failed: list[tuple[Pod, Decision]] = []
        for pod in pods:
            started = time.perf_counter()
            decision = self.framework.schedule_one(requests[pod.pk], cluster.snapshot)
            report.schedule_s += time.perf_counter() - started
            if decision.placement is None:
                failed.append((pod, decision))
                continue
            placed.append((pod, decision))
            if len(placed) >= self.commit_size:
                self._commit(cluster, placed, report, now)
                placed = []
        self._commit(cluster, placed, report, now)

        # 8. Why the others wait.
        started = time.perf_counter()
        services.pods_unschedulable(failed=failed, now=now)
        report.commit_s += time.perf_counter() - started
        report.attempted = len(pods)
        report.unschedulable = len(failed)
        report.more = len(pods) == self.batch_size
        return report

    def _commit(
        self,
        cluster: selectors.ClusterState,
        placed: list[tuple[Pod, Decision]],
        report: CycleReport,
        now: datetime,
    ) -> None:
        started = time.perf_counter()
        result = services.placements_commit(
            cluster=cluster, placed=placed, scheduler=self.identity, now=now
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

    def stand_down(self) -> None:
        services.lease_release(name=self.lease_name, holder=self.identity)
        self.leading = False
