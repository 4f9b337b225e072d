"""Evictions for the scheduling cycle (scheduling.worker.cycle): whole workloads evicted through the
side, then in the database (phase 8, and what admission and reclaim evict), and the evictions a
gang may ask for (phase 7, reads only): to make room within its cohort, or, when its reservation
cannot complete within the horizon, to move movable work off the nodes it needs (consolidation).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduling import services
from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing import admission as queue_admission
from scheduling.core.queueing.batch import Eviction
from scheduling.core.queueing.config import ConsolidationPolicy
from scheduling.core.queueing.consolidation import REASON as CONSOLIDATED
from scheduling.core.queueing.consolidation import consolidation_victims
from scheduling.core.queueing.gang_reclaim import gang_victims
from scheduling.core.queueing.preemption import may_preempt
from scheduling.core.scheduler import Framework
from scheduling.core.types import PodRequest, ServiceClass
from scheduling.models import Pod, Workload
from scheduling.worker import queue_state
from scheduling.worker.cache import ClusterCache
from scheduling.worker.cluster_state import ClusterState
from scheduling.worker.cycle_report import CycleReport
from scheduling.worker.side import ClusterSide, PodEviction, Verdict

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Evictions:
    side: ClusterSide
    cache: ClusterCache

    def carry_out(
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
                .order_by("id")  # the same evictions in the same order, run after run
            )
            preemptor = (
                by_uid[intent.preemptor.uid].workload
                if intent.preemptor is not None and intent.preemptor.uid in by_uid
                else None
            )
            evicted += len(self.workloads(workloads, intent.reason, preemptor, now, report))
        return evicted

    def workloads(
        self,
        workloads: Sequence[Workload],
        reason: str,
        preemptor: Workload | None,
        now: datetime,
        report: CycleReport,
        pending_reason: str = queue_admission.PREEMPTED,
        requeue_at: datetime | None = None,
        said: dict[str, str] | None = None,
    ) -> set[int]:
        """Evict whole workloads: every placed pod through the side, then, in the database, the
        workloads whose pods the side let go (a workload with a pod the side refused keeps all
        of it: evicted whole or not at all). Returns the ids of those evicted; `said`, when
        given, gets what the cluster answered for each pod."""
        if not workloads:
            return set()
        pods = list(
            Pod.objects.filter(workload__in=workloads, phase__in=Pod.PLACED_PHASES)
            .select_related("workload__tenant")
            .order_by("id")
        )
        preemptor_pod = preemptor.pods.first() if preemptor is not None else None
        verdicts = self.side.evict([PodEviction(p, reason, preemptor_pod) for p in pods], now, said)
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


def gang_reclaim(
    framework: Framework,
    members: Sequence[PodRequest],
    cluster: ClusterState,
    by_uid: dict[str, Pod],
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

    victims = gang_victims(framework, cluster.snapshot, members, evictable)
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


def gang_consolidation(
    framework: Framework,
    members: Sequence[PodRequest],
    cluster: ClusterState,
    by_uid: dict[str, Pod],
) -> Eviction | None:
    """Consolidation for a gang whose reservation cannot complete within the horizon: the
    movable pods to move off the fewest nodes so that it fits, each placeable elsewhere
    (scheduling.core.queueing.consolidation). A cluster queue annotated
    gpusched.io/consolidation: Never takes no part: its gangs move nothing, its pods never move."""
    workload = by_uid[members[0].uid].workload
    never = ConsolidationPolicy.NEVER.value
    own = workload.cluster_queue
    if own is not None and own.consolidation == never:
        return None
    kept = {
        str(uid)
        for uid in Pod.objects.filter(
            uid__in=list(cluster.held), workload__cluster_queue__consolidation=never
        ).values_list("uid", flat=True)
    }
    victims = consolidation_victims(
        framework, cluster.snapshot, members, lambda held: held.pod.uid not in kept
    )
    if not victims:
        return None
    reason = (
        f"{CONSOLIDATED}: moved to make room for gang {workload.tenant.name}/{workload.name}, "
        "whose reservation could not complete within its horizon"
    )
    return Eviction(tuple(victims), reason, members[0])
