"""Phase 3 of the scheduling cycle (scheduling.worker.cycle): admission. An admission cycle over the
cluster queues (quota, flavors, fair sharing, cohort trees; scheduling.core.queueing.admission)
and what it decides written back: first the admitted workloads whose pods were not all placed
within the pods-ready timeout are evicted and requeued with backoff (Kueue's waitForPodsReady),
then the deactivated workloads and drained queues, then the victims of quota preemption, before
anything is admitted. Without any cluster queue, or where the cluster admitted already, every
active workload is admitted as it comes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice

from scheduling import services
from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.feasibility import EmptyClusterFeasibility
from scheduling.core.queueing.pods_ready import WaitForPodsReady
from scheduling.models import Pod, Workload
from scheduling.worker import queue_state
from scheduling.worker.cycle_evictions import Evictions
from scheduling.worker.cycle_report import CycleReport
from scheduling.worker.load_feed import LoadFeed
from scheduling.worker.side import ClusterSide, Waiting

REPORT_CHUNK = 2000  # pods of waiting workloads told why at a time


@dataclass(frozen=True)
class Admission:
    side: ClusterSide
    evictions: Evictions
    load_feed: LoadFeed
    pods_ready: WaitForPodsReady
    batch_size: int
    # What could ever run where, asked when the cluster queues are managed here.
    feasibility: Callable[[], EmptyClusterFeasibility | None]
    starving_after_s: float | None = None  # the starvation bound (core.queueing.admission)

    def run(self, now: datetime, report: CycleReport) -> tuple[int, int]:
        """Returns (workloads admitted, workloads evicted for them or by deactivation)."""
        if not self.side.queues_admit:  # admitted in the cluster already (beside Kueue)
            return self._without_queues(now, report)
        # Admission fair sharing: LocalQueue usage history moves on Kueue's sampling interval.
        services.local_queue_usage_sample(now=now)
        setup = queue_state.queue_setup()
        if not setup.managed:
            return self._without_queues(now, report)
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
            feasibility=self.feasibility(),
            now=now.timestamp(),
            starving_after_s=self.starving_after_s,
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
                gone = self.evictions.workloads(own, reason, target, now, report)
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
                    topology=setup.topology_of(chosen),
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
        if self.side.tells_pods:
            report.reported += self._tell_pods(changed, now)
        return admitted, len(evicted) + dropped

    def _tell_pods(self, changed: Sequence[Workload], now: datetime) -> int:
        """The pods of workloads whose reason changed are never tried while their workload waits
        for quota: they are told why here, a chunk of bare pods at a time, so a workload of
        thousands costs no more memory than a chunk of them."""
        told = {w.pk: f"{w.pending_reason}: {w.reason}" for w in changed}
        waiting = (
            Pod.objects.filter(workload_id__in=list(told), phase=Pod.Phase.PENDING)
            .only("uid", "workload_id")
            .order_by("id")
            .iterator(chunk_size=REPORT_CHUNK)
        )
        reported = 0
        while chunk := list(islice(waiting, REPORT_CHUNK)):
            reported += self.side.report(
                [Waiting(pod, told[pod.workload_id]) for pod in chunk], now
            )
        return reported

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
                self.evictions.workloads(
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

    def _without_queues(self, now: datetime, report: CycleReport) -> tuple[int, int]:
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
                    self.evictions.workloads(
                        [workload], eviction.message, None, now, report, eviction.reason
                    )
                )
        return evicted
