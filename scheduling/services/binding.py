"""Binding is batched: one transaction places a whole batch of pods with a handful of statements. If
the database refuses the batch (a pod bound meanwhile, a GPU or node that would be over-committed:
the CHECK and UNIQUE constraints of models.py), it is retried pod by pod so only the pods in
conflict are left pending."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db import IntegrityError, transaction
from django.db.models import F

from scheduling import events
from scheduling.bulk import insert_rows
from scheduling.core.scheduler import Decision
from scheduling.core.types import (
    MILLI_PER_GPU,
)
from scheduling.models import (
    Allocation,
    Gpu,
    GpuAssignment,
    Node,
    NodeNuma,
    PlacementDecision,
    Pod,
    Workload,
)
from scheduling.services.allocations import add_counts, allocations_release
from scheduling.services.decisions import explanation
from scheduling.services.workloads import workloads_lock
from scheduling.worker.cluster_state import ClusterState

logger = logging.getLogger(__name__)


class _Conflict(Exception):
    """The database changed under the batch (a pod bound or cancelled meanwhile)."""


@dataclass
class CommitResult:
    bound: list[Pod] = field(default_factory=list)
    conflicts: list[tuple[Pod, str]] = field(default_factory=list)


def placements_commit(
    *,
    cluster: ClusterState,
    placed: Sequence[tuple[Pod, Decision]],
    scheduler: str,
    now: datetime,
    all_or_nothing: bool = False,
) -> CommitResult:
    """Bind a batch of placed pods in one transaction; on conflict, bind them one by one - or,
    for a gang (`all_or_nothing`), bind none of them."""
    if not placed:
        return CommitResult()
    if any(decision.placement is None for _, decision in placed):
        raise ValueError("only decisions with a placement can be bound")
    try:
        with transaction.atomic():
            _bind(cluster, placed, scheduler, now)
        return CommitResult(bound=[pod for pod, _ in placed])
    except (IntegrityError, _Conflict) as exc:
        if all_or_nothing:
            logger.info("gang bind refused (%s); the gang waits", exc)
            return CommitResult(conflicts=[(pod, f"gang refused: {exc}") for pod, _ in placed])
        logger.info("batch bind refused (%s); binding one by one", exc)
    result = CommitResult()
    # Pods someone else bound meanwhile are simply dropped; the rest are tried one by one, since
    # their GPUs may now be taken too.
    still_pending = set(
        Pod.objects.filter(pk__in=[p.pk for p, _ in placed], phase=Pod.Phase.PENDING).values_list(
            "pk", flat=True
        )
    )
    for pod, decision in placed:
        if pod.pk not in still_pending:
            result.conflicts.append((pod, "bound or cancelled by someone else"))
            continue
        try:
            with transaction.atomic():
                _bind(cluster, [(pod, decision)], scheduler, now)
            result.bound.append(pod)
        except (IntegrityError, _Conflict) as exc:
            result.conflicts.append((pod, str(exc)))
    return result


def _bind(
    cluster: ClusterState, placed: Sequence[tuple[Pod, Decision]], scheduler: str, now: datetime
) -> None:
    pods = [pod for pod, _ in placed]
    # The lock order of scheduling/services/evictions.py: the workloads first, by id, then their
    # pods. A cancel or an eviction of these workloads waits for this bind, or this bind for it.
    workloads_lock(p.workload_id for p in pods)
    moved = Pod.objects.filter(pk__in=[p.pk for p in pods], phase=Pod.Phase.PENDING).update(
        phase=Pod.Phase.BOUND,
        bound_at=now,
        attempts=F("attempts") + 1,
        last_attempt_at=now,
        last_reason="",
        next_attempt_at=None,
        nominated_node="",
    )
    if moved != len(pods):
        raise _Conflict(f"{len(pods) - moved} pod(s) were bound or cancelled by someone else")
    Workload.objects.filter(pk__in={p.workload_id for p in pods}).exclude(pending_reason="").update(
        pending_reason="", reason=""
    )

    records = insert_rows(
        [
            PlacementDecision(
                pod=pod,
                node=decision.node or "",
                outcome=decision.status.code.value,
                summary=decision.summary()[:1024],
                explanation=explanation(decision),
            )
            for pod, decision in placed
        ]
    )
    allocations = insert_rows(
        [
            Allocation(
                pod=pod,
                node_id=cluster.node_ids[decision.placement.node],
                state=Allocation.State.BOUND,
                active=True,
                cpu_milli=pod.cpu_milli,
                memory_mib=pod.memory_mib,
                numa_cpu_milli=list(decision.placement.numa_cpu_milli),
                scope=decision.placement.scope.value if decision.placement.scope else "",
                scheduler=scheduler,
                bound_at=now,
            )
            for pod, decision in placed
            if decision.placement is not None
        ]
    )
    assignments: list[GpuAssignment] = []
    gpu_delta: dict[int, int] = defaultdict(int)
    lent_delta: dict[int, int] = defaultdict(int)
    cpu_delta: dict[int, int] = defaultdict(int)
    memory_delta: dict[int, int] = defaultdict(int)
    for (pod, decision), allocation in zip(placed, allocations, strict=True):
        placement = decision.placement
        assert placement is not None
        cpu_delta[allocation.node_id] += pod.cpu_milli
        memory_delta[allocation.node_id] += pod.memory_mib
        for index in placement.gpu_indices:
            gpu_id = cluster.gpu_ids[(placement.node, index)]
            (lent_delta if placement.reclaimed else gpu_delta)[gpu_id] += placement.milli_per_gpu
            assignments.append(
                GpuAssignment(
                    allocation=allocation,
                    gpu_id=gpu_id,
                    milli=placement.milli_per_gpu,
                    exclusive=placement.milli_per_gpu == MILLI_PER_GPU,
                    reclaimed=placement.reclaimed,
                )
            )
        for index, slot in placement.mig_slots:
            gpu_id = cluster.gpu_ids[(placement.node, index)]
            assignments.append(
                GpuAssignment(allocation=allocation, gpu_id=gpu_id, milli=0, mig_slot=slot)
            )
    insert_rows(assignments)
    numa_delta: dict[int, int] = defaultdict(int)
    for _, decision in placed:
        assert decision.placement is not None
        for index, amount in enumerate(decision.placement.numa_cpu_milli):
            pk = cluster.numa_ids.get((decision.placement.node, index))
            if pk is not None and amount:
                numa_delta[pk] += amount
    # Checked increments (what the rows hold now, not what our snapshot saw) for what a node's
    # capacity bounds; the GPUs' bound is a CHECK constraint, their capacity never changes.
    checked = (
        add_counts(Node, "cpu_used_milli", cpu_delta, capacity="cpu_milli")
        and add_counts(Node, "memory_used_mib", memory_delta, capacity="memory_mib")
        and add_counts(NodeNuma, "cpu_used_milli", numa_delta, capacity="cpu_milli")
    )
    if not checked:
        raise _Conflict("a node's CPU, memory or NUMA CPU would be over-committed")
    add_counts(Gpu, "used_milli", gpu_delta)
    add_counts(Gpu, "lent_milli", lent_delta)
    events.publish(
        *(
            events.PodBound.of(
                pod,
                node=decision.placement.node,
                gpus=list(decision.placement.gpu_indices),
                milli_per_gpu=decision.placement.milli_per_gpu,
                mig_slots=[list(slot) for slot in decision.placement.mig_slots],
                scope=decision.placement.scope.value if decision.placement.scope else "",
                decision=record.pk,
                reclaimed=decision.placement.reclaimed,
            )
            for (pod, decision), record in zip(placed, records, strict=True)
            if decision.placement is not None
        )
    )


def pod_requeue(*, pod: Pod, reason: str, now: datetime, backoff_s: float = 1.0) -> None:
    """The API server refused the binding (409: bound elsewhere meanwhile, or the pod changed):
    give back what the database reserved and put the pod back in the queue after a short backoff.
    """
    with transaction.atomic():
        allocations = Allocation.objects.filter(pod=pod, active=True).select_related("node", "pod")
        allocations_release(allocations, reason=f"bind refused: {reason}"[:256], now=now)
        Pod.objects.filter(pk=pod.pk).update(
            phase=Pod.Phase.PENDING,
            bound_at=None,
            last_reason=reason[:1024],
            last_attempt_at=now,
            next_attempt_at=now + timedelta(seconds=backoff_s),
        )
        pod.phase = Pod.Phase.PENDING
        events.publish(events.PodPhaseChanged.of(pod, phase=Pod.Phase.PENDING))
