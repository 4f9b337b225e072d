"""Pods the simulator (or a kubelet) started or finished."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from scheduling import events
from scheduling.bulk import update_rows
from scheduling.models import (
    Allocation,
    Pod,
    Workload,
)
from scheduling.services.allocations import allocations_release
from scheduling.services.workloads import workload_event, workloads_lock


def pods_cluster_managed(*, pods: Sequence[Pod]) -> None:
    """The cluster runs these pods now (Kubernetes): it says when they are gone, and evicted or
    cancelled they keep what they hold (Terminating) until then."""
    Pod.objects.filter(pk__in=[p.pk for p in pods]).update(cluster_managed=True)
    for pod in pods:
        pod.cluster_managed = True


def pods_start(*, pods: Sequence[Pod], now: datetime) -> None:
    """The simulator (or kubelet) started bound pods."""
    if not pods:
        return
    with transaction.atomic():
        workloads_lock(p.workload_id for p in pods)  # the one lock order: workloads, then pods
        Pod.objects.filter(pk__in=[p.pk for p in pods], phase=Pod.Phase.BOUND).update(
            phase=Pod.Phase.RUNNING, started_at=now
        )
        workloads = {p.workload_id: p.workload for p in pods}
        started = Workload.objects.filter(pk__in=list(workloads), state=Workload.State.ADMITTED)
        newly_running = list(started.values_list("pk", flat=True))
        started.update(state=Workload.State.RUNNING)
        for pk in newly_running:
            workloads[pk].state = Workload.State.RUNNING
        events.publish(
            *(events.PodPhaseChanged.of(p, phase=Pod.Phase.RUNNING) for p in pods),
            *(workload_event(workloads[pk]) for pk in newly_running),
        )


def _still_in(pods: Sequence[Pod], phases: Sequence[str]) -> list[Pod]:
    """The pods whose phase in the database is still one of these, locked to the end of the
    transaction, with that phase. A pod whose end was recorded already (seen twice, or by another
    writer) is left as it is: an end is recorded once. Their workloads are locked first, by id:
    the one lock order (docs/architecture.md), or an eviction holding a workload and waiting for
    its pods would deadlock with an end holding the pods and closing the workload."""
    workloads_lock(p.workload_id for p in pods)
    current = dict(
        Pod.objects.select_for_update()
        .filter(pk__in=[p.pk for p in pods], phase__in=phases)
        .order_by("pk")
        .values_list("pk", "phase")
    )
    for pod in pods:
        if pod.pk in current:
            pod.phase = current[pod.pk]
    return [pod for pod in pods if pod.pk in current]


def pods_finish(*, pods: Sequence[Pod], now: datetime, succeeded: bool = True) -> None:
    """Pods ended: their allocations are released and finished workloads are closed."""
    if not pods:
        return
    phase = Pod.Phase.SUCCEEDED if succeeded else Pod.Phase.FAILED
    with transaction.atomic():
        pods = _still_in(pods, Pod.ACTIVE_PHASES)
        if not pods:
            return
        allocations_release(
            Allocation.objects.filter(pod__in=pods, active=True).select_related("node", "pod"),
            reason="pod succeeded" if succeeded else "pod failed",
            now=now,
        )
        Pod.objects.filter(pk__in=[p.pk for p in pods]).update(phase=phase, finished_at=now)
        workload_ids = {p.workload_id for p in pods}
        still_active = set(
            Pod.objects.filter(workload_id__in=workload_ids, phase__in=Pod.ACTIVE_PHASES)
            .values_list("workload_id", flat=True)
            .distinct()
        )
        by_workload = {p.workload_id: p.workload for p in pods}
        done = [w for pk, w in by_workload.items() if pk not in still_active]
        final = Workload.State.FINISHED if succeeded else Workload.State.FAILED
        Workload.objects.filter(pk__in=[w.pk for w in done]).update(state=final, finished_at=now)
        for workload in done:
            workload.state, workload.finished_at = final, now
        events.publish(
            *(events.PodPhaseChanged.of(p, phase=phase) for p in pods),
            *(workload_event(w) for w in done),
        )


def pods_terminated(*, pods: Sequence[Pod], now: datetime) -> None:
    """Evicted (or cancelled) pods the cluster no longer runs: what they held is free now. A pod of
    a requeued submitted workload waits to be placed again; a mirrored pod is gone for good, and a
    mirrored workload left without pods ends; a cancelled workload's pod is cancelled."""
    pods = [p for p in pods if p.phase == Pod.Phase.TERMINATING]
    if not pods:
        return
    with transaction.atomic():
        pods = _still_in(pods, [Pod.Phase.TERMINATING])
        if not pods:
            return
        allocations_release(
            Allocation.objects.filter(pod__in=pods, active=True).select_related("node", "pod"),
            reason="evicted pod terminated",
            now=now,
        )
        for pod in pods:
            if pod.workload.state not in Workload.ACTIVE_STATES:
                pod.phase = Pod.Phase.CANCELLED
            elif pod.workload.origin == Workload.Origin.MIRRORED:
                pod.phase = Pod.Phase.FAILED
            else:
                pod.phase = Pod.Phase.PENDING
            pod.finished_at = None if pod.phase == Pod.Phase.PENDING else now
            pod.bound_at = pod.started_at = None
            pod.next_attempt_at = None
        update_rows(pods, ["phase", "finished_at", "bound_at", "started_at"])
        workload_ids = {p.workload_id for p in pods if p.phase == Pod.Phase.FAILED}
        still_active = set(
            Pod.objects.filter(workload_id__in=workload_ids, phase__in=Pod.ACTIVE_PHASES)
            .values_list("workload_id", flat=True)
            .distinct()
        )
        ended = [
            p.workload
            for p in {p.workload_id: p for p in pods}.values()
            if p.workload_id in workload_ids - still_active
        ]
        for workload in ended:
            workload.state, workload.finished_at = Workload.State.FAILED, now
            workload.cluster_queue, workload.quota_usage = None, {}
        update_rows(ended, ["state", "finished_at", "cluster_queue", "quota_usage"])
        events.publish(
            *(events.PodPhaseChanged.of(p, phase=p.phase) for p in pods),
            *(workload_event(w) for w in ended),
        )


def pods_vacate(*, pods: Sequence[Pod], now: datetime) -> None:
    """Pods of a workload that goes on whose cluster pod ended or went (a batch/v1 Job's pod that
    finished, failed or was deleted while the Job runs on: kube.jobs): what they held is free and
    each waits, Pending, for the next pod its controller makes. The workload ends with the Job,
    not with its pods."""
    if not pods:
        return
    with transaction.atomic():
        pods = _still_in(pods, Pod.ACTIVE_PHASES)
        if not pods:
            return
        allocations_release(
            Allocation.objects.filter(pod__in=pods, active=True).select_related("node", "pod"),
            reason="pod gone, its workload goes on",
            now=now,
        )
        placed = [p for p in pods if p.phase != Pod.Phase.PENDING]
        for pod in pods:
            pod.phase, pod.finished_at = Pod.Phase.PENDING, None
            pod.bound_at = pod.started_at = pod.next_attempt_at = None
        update_rows(pods, ["phase", "finished_at", "bound_at", "started_at", "next_attempt_at"])
        events.publish(*(events.PodPhaseChanged.of(p, phase=p.phase) for p in placed))
