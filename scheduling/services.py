"""Writes. Every change to cluster state goes through here, in one transaction with its outbox
events.

Binding is batched: one transaction places a whole batch of pods with a handful of statements. If
the database refuses the batch (a pod bound meanwhile, a GPU or node that would be over-committed:
the CHECK and UNIQUE constraints of models.py), it is retried pod by pod so only the pods in
conflict are left pending."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import Case, F, IntegerField, Q, Value, When
from django.utils import timezone

from scheduling import events
from scheduling.core.queueing.config import ClusterQueue as ClusterQueueSpec
from scheduling.core.queueing.config import QueueConfig
from scheduling.core.scheduler import Decision
from scheduling.core.types import (
    MILLI_PER_GPU,
    NodeSpec,
    ServiceClass,
)
from scheduling.models import (
    Allocation,
    ClusterQueue,
    Gpu,
    GpuAssignment,
    Lease,
    LocalQueue,
    Node,
    PlacementDecision,
    Pod,
    PriorityClass,
    ResourceFlavor,
    Tenant,
    Workload,
)
from scheduling.pod_template import PodTemplate
from scheduling.selectors import ClusterState, topology_to_json

logger = logging.getLogger(__name__)

MAX_BACKOFF_S = 10.0
EXPLAINED_CANDIDATES = 5


class ServiceError(Exception):
    """A request the state does not allow; the message says why (shown to API clients)."""


class _Conflict(Exception):
    """The database changed under the batch (a pod bound or cancelled meanwhile)."""


# --- tenants and nodes ------------------------------------------------------------------------


def tenant_create(*, name: str, namespace: str | None = None) -> Tenant:
    return Tenant.objects.create(name=name, namespace=namespace or name)


def node_register(*, spec: NodeSpec, source: str = Node.Source.SIMULATOR) -> Node:
    """Create or update a node and its GPUs from what the cluster reports."""
    with transaction.atomic():
        node, created = Node.objects.update_or_create(
            name=spec.name,
            defaults={
                "source": source,
                "labels": dict(spec.labels),
                "taints": [
                    {"key": t.key, "value": t.value, "effect": t.effect.value} for t in spec.taints
                ],
                "cpu_milli": spec.cpu_milli,
                "memory_mib": spec.memory_mib,
                "cordoned": spec.cordoned,
                "topology": topology_to_json(spec.topology) if spec.topology else {},
            },
        )
        existing = {gpu.index: gpu for gpu in node.gpus.all()}
        for device in spec.gpus:
            values = {
                "uuid": device.uuid,
                "model": device.model,
                "memory_mib": device.memory_mib,
                "sharing": device.sharing.value,
                "mig_layout": list(device.mig_layout),
            }
            if device.index in existing:
                Gpu.objects.filter(pk=existing[device.index].pk).update(**values)
            else:
                Gpu.objects.create(node=node, index=device.index, **values)
        events.publish(
            events.NodeChanged(
                node=node.name, cordoned=node.cordoned, gpus=len(spec.gpus), labels=node.labels
            )
        )
    if created:
        logger.debug("node %s registered with %d GPUs", node.name, len(spec.gpus))
    return node


def node_set_cordoned(*, node: Node, cordoned: bool) -> Node:
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(cordoned=cordoned)
        node.cordoned = cordoned
        events.publish(
            events.NodeChanged(
                node=node.name, cordoned=cordoned, gpus=node.gpus.count(), labels=node.labels
            )
        )
    return node


# --- workloads --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSetSpec:
    name: str
    count: int
    template: PodTemplate
    min_count: int | None = None  # set: a gang of at least this many pods


def workload_submit(
    *,
    tenant: Tenant,
    name: str,
    pod_sets: Sequence[PodSetSpec],
    queue_name: str = "default",
    priority: int | None = None,
    priority_class_name: str = "",
    service_class: ServiceClass = ServiceClass.BATCH,
    raw_pod_sets: list[dict[str, Any]] | None = None,
    maximum_execution_time_s: int | None = None,
) -> Workload:
    """A new workload, Pending until its LocalQueue's cluster queue admits it. A priority class
    (by name, else the global default one) sets the priority unless `priority` is given, and
    whether the workload may preempt others."""
    if not pod_sets:
        raise ServiceError("a workload needs at least one pod set")
    with transaction.atomic():
        if Workload.objects.filter(tenant=tenant, name=name).exists():
            raise ServiceError(f"workload {name!r} already exists for tenant {tenant.name}")
        if priority_class_name:
            priority_class = PriorityClass.objects.filter(name=priority_class_name).first()
            if priority_class is None:
                raise ServiceError(f"priority class {priority_class_name!r} does not exist")
        else:
            priority_class = PriorityClass.objects.filter(global_default=True).first()
        if priority is None:
            priority = priority_class.value if priority_class else 0
        workload = Workload.objects.create(
            tenant=tenant,
            name=name,
            queue_name=queue_name,
            priority=priority,
            priority_class_name=priority_class.name if priority_class else "",
            preemption_policy=(
                priority_class.preemption_policy
                if priority_class
                else PriorityClass.Preemption.PREEMPT_LOWER_PRIORITY
            ),
            maximum_execution_time_s=maximum_execution_time_s,
            service_class=service_class.value,
            pod_sets=raw_pod_sets
            if raw_pod_sets is not None
            else [_pod_set_json(s) for s in pod_sets],
        )
        Pod.objects.bulk_create(
            [_pod_row(workload, pod_set, k) for pod_set in pod_sets for k in range(pod_set.count)]
        )
        events.publish(_workload_event(workload))
    return workload


def _pod_row(workload: Workload, pod_set: PodSetSpec, k: int) -> Pod:
    t = pod_set.template
    return Pod(
        workload=workload,
        name=f"{workload.name}-{pod_set.name}-{k}",
        pod_set=pod_set.name,
        priority=workload.priority,
        service_class=workload.service_class,
        cpu_milli=t.cpu_milli,
        memory_mib=t.memory_mib,
        gpus=t.gpus,
        gpu_milli=t.gpu_milli,
        mig_profile=t.mig_profile,
        mig_count=t.mig_count,
        gpu_models=list(t.gpu_models),
        topology_policy=t.topology_policy.value if t.topology_policy else "",
        topology_scope=t.topology_scope.value if t.topology_scope else "",
        node_selector=dict(t.node_selector),
        tolerations=list(t.tolerations),
        gang_min_count=pod_set.min_count or 0,
        simulation=dict(t.simulation),
    )


def _pod_set_json(pod_set: PodSetSpec) -> dict[str, Any]:
    return {"name": pod_set.name, "count": pod_set.count, "minCount": pod_set.min_count}


def _workload_event(workload: Workload) -> events.WorkloadChanged:
    return events.WorkloadChanged(
        uid=str(workload.uid),
        tenant=workload.tenant.name,
        name=workload.name,
        queue=workload.queue_name,
        state=workload.state,
        reason=workload.reason,
        cluster_queue=workload.cluster_queue.name if workload.cluster_queue else "",
        pending_reason=workload.pending_reason,
    )


def workloads_admit(*, workloads: Iterable[Workload], now: datetime) -> int:
    """Quota reserved: the workloads' pods may now be placed."""
    admitted = [w for w in workloads if w.state == Workload.State.PENDING]
    if not admitted:
        return 0
    with transaction.atomic():
        Workload.objects.filter(
            pk__in=[w.pk for w in admitted], state=Workload.State.PENDING
        ).update(state=Workload.State.ADMITTED, admitted_at=now, reason="")
        for workload in admitted:
            workload.state, workload.admitted_at, workload.reason = Workload.State.ADMITTED, now, ""
        events.publish(*(_workload_event(w) for w in admitted))
    return len(admitted)


def workload_cancel(*, workload: Workload, now: datetime | None = None) -> Workload:
    now = now or timezone.now()
    with transaction.atomic():
        if workload.state not in Workload.ACTIVE_STATES:
            raise ServiceError(f"workload {workload.name} is already {workload.state}")
        pods = list(
            workload.pods.filter(phase__in=Pod.ACTIVE_PHASES).select_related("workload__tenant")
        )
        _release(
            Allocation.objects.filter(pod__in=pods, active=True).select_related("node", "pod"),
            reason="workload cancelled",
            now=now,
        )
        Pod.objects.filter(pk__in=[p.pk for p in pods]).update(
            phase=Pod.Phase.CANCELLED, finished_at=now
        )
        Workload.objects.filter(pk=workload.pk).update(
            state=Workload.State.CANCELLED, finished_at=now
        )
        workload.state, workload.finished_at = Workload.State.CANCELLED, now
        events.publish(
            *(events.PodPhaseChanged.of(p, phase=Pod.Phase.CANCELLED) for p in pods),
            _workload_event(workload),
        )
    return workload


# --- queues -----------------------------------------------------------------------------------


def queues_apply(*, config: QueueConfig) -> dict[str, list[str]]:
    """Create or update flavors, cluster queues, local queues and priority classes (Kueue-shaped
    documents, scheduling.core.queueing.config). Names are kept; nothing is deleted."""
    try:
        config.check_references(frozenset(ResourceFlavor.objects.values_list("name", flat=True)))
    except ValueError as exc:
        raise ServiceError(str(exc)) from exc
    known_queues = {cq.name for cq in config.cluster_queues} | set(
        ClusterQueue.objects.values_list("name", flat=True)
    )
    for lq in config.local_queues:
        if lq.cluster_queue not in known_queues:
            raise ServiceError(
                f"LocalQueue {lq.namespace}/{lq.name}: ClusterQueue {lq.cluster_queue!r} "
                "does not exist"
            )
    if sum(1 for pc in config.priority_classes if pc.global_default) > 1:
        raise ServiceError("only one priority class may be the global default")
    with transaction.atomic():
        for flavor in config.flavors:
            ResourceFlavor.objects.update_or_create(
                name=flavor.name,
                defaults={
                    "node_labels": dict(flavor.node_labels),
                    "node_taints": [
                        {"key": t.key, "value": t.value, "effect": t.effect.value}
                        for t in flavor.node_taints
                    ],
                    "tolerations": [toleration_json(t) for t in flavor.tolerations],
                },
            )
        for cq in config.cluster_queues:
            ClusterQueue.objects.update_or_create(name=cq.name, defaults=cluster_queue_fields(cq))
        rows = {
            row.name: row
            for row in ClusterQueue.objects.filter(
                name__in={lq.cluster_queue for lq in config.local_queues}
            )
        }
        for lq in config.local_queues:
            LocalQueue.objects.update_or_create(
                namespace=lq.namespace,
                name=lq.name,
                defaults={
                    "cluster_queue": rows[lq.cluster_queue],
                    "fair_sharing_weight": lq.weight,
                },
            )
        for pc in config.priority_classes:
            if pc.global_default:
                PriorityClass.objects.exclude(name=pc.name).update(global_default=False)
            PriorityClass.objects.update_or_create(
                name=pc.name,
                defaults={
                    "value": pc.value,
                    "preemption_policy": pc.preemption_policy.value,
                    "description": pc.description[:256],
                    "global_default": pc.global_default,
                },
            )
        names = {
            "flavors": [f.name for f in config.flavors],
            "cluster_queues": [cq.name for cq in config.cluster_queues],
            "local_queues": [f"{lq.namespace}/{lq.name}" for lq in config.local_queues],
            "priority_classes": [pc.name for pc in config.priority_classes],
        }
        events.publish(events.QueuesChanged(**names))
    return names


def cluster_queue_fields(cq: ClusterQueueSpec) -> dict[str, Any]:
    """A core ClusterQueue as the model's columns (amounts stay canonical)."""
    return {
        "cohort": cq.cohort,
        "queueing_strategy": cq.queueing_strategy.value,
        "resource_groups": [
            {
                "coveredResources": list(group.covered),
                "flavors": [
                    {
                        "name": fq.name,
                        "resources": [
                            {
                                "name": resource,
                                "nominalQuota": quota.nominal,
                                "borrowingLimit": quota.borrowing_limit,
                                "lendingLimit": quota.lending_limit,
                            }
                            for resource, quota in fq.resources.items()
                        ],
                    }
                    for fq in group.flavors
                ],
            }
            for group in cq.resource_groups
        ],
        "within_cluster_queue": cq.preemption.within_cluster_queue.value,
        "reclaim_within_cohort": cq.preemption.reclaim_within_cohort.value,
        "borrow_within_cohort": cq.preemption.borrow_within_cohort.value,
        "borrow_max_priority_threshold": cq.preemption.borrow_max_priority_threshold,
        "fair_sharing_weight": cq.weight,
    }


def toleration_json(t: Any) -> dict[str, str]:
    doc = {"key": t.key, "operator": t.operator, "value": t.value}
    if t.effect is not None:
        doc["effect"] = t.effect.value
    return doc


@dataclass(frozen=True)
class WorkloadAdmission:
    """One decision of an admission cycle: quota reserved in `cluster_queue` with these flavors,
    after evicting `victims`."""

    workload: Workload
    cluster_queue: ClusterQueue
    flavors: dict[str, str]
    quota_usage: dict[str, int]  # "flavor|resource" -> canonical amount
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] = field(default_factory=list)
    victims: tuple[Workload, ...] = ()


def queue_admit(*, admissions: Sequence[WorkloadAdmission], now: datetime) -> int:
    """Evict the victims and reserve quota for the workloads, in one transaction."""
    if not admissions:
        return 0
    with transaction.atomic():
        payloads: list[events.EventPayload] = []
        evicted: set[int] = set()
        admitted: list[Workload] = []
        for admission in admissions:
            victims = [v for v in admission.victims if v.pk not in evicted]
            if victims:
                target = admission.workload
                reason = (
                    f"Preempted to admit {target.tenant.name}/{target.name} "
                    f"(priority {target.priority}) in ClusterQueue {admission.cluster_queue.name}"
                )
                more, _, gone = _evict(victims, reason=reason, preemptor=target, now=now)
                payloads += more
                evicted |= gone
                # A victim still waiting for quota was never holding any: the cycle's view is
                # stale, so this admission waits for the next cycle rather than over-commit.
                if Workload.objects.filter(
                    pk__in=[v.pk for v in victims if v.pk not in gone],
                    state=Workload.State.PENDING,
                ).exists():
                    continue
            w = admission.workload
            values = {
                "state": Workload.State.ADMITTED,
                "admitted_at": now,
                "reason": "",
                "pending_reason": "",
                "cluster_queue": admission.cluster_queue,
                "flavors": admission.flavors,
                "quota_usage": admission.quota_usage,
                "node_selector": admission.node_selector,
                "tolerations": admission.tolerations,
            }
            if Workload.objects.filter(pk=w.pk, state=Workload.State.PENDING).update(**values):
                for key, value in values.items():
                    setattr(w, key, value)
                admitted.append(w)
        events.publish(*payloads, *(_workload_event(w) for w in admitted))
    return len(admitted)


def workloads_evict(
    *, workloads: Sequence[Workload], reason: str, now: datetime, preemptor: Workload | None = None
) -> list[str]:
    """Preempt admitted workloads: release their pods' allocations, put the pods back to Pending
    and the workloads back in their queues (requeued, quota released). Returns the uids of the
    pods whose allocations were released."""
    with transaction.atomic():
        payloads, released, _ = _evict(workloads, reason=reason, preemptor=preemptor, now=now)
        events.publish(*payloads)
    return released


def _evict(
    workloads: Sequence[Workload], *, reason: str, preemptor: Workload | None, now: datetime
) -> tuple[list[events.EventPayload], list[str], set[int]]:
    """Returns the events to publish, the uids of the pods whose allocations were released and
    the ids of the workloads evicted (those that were admitted or running)."""
    rows = list(
        Workload.objects.filter(
            pk__in=[w.pk for w in workloads],
            state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
        ).select_related("tenant", "cluster_queue")
    )
    if not rows:
        return [], [], set()
    pods = list(
        Pod.objects.filter(workload__in=rows, phase__in=Pod.ACTIVE_PHASES).select_related(
            "workload__tenant"
        )
    )
    allocations = list(
        Allocation.objects.filter(pod__in=pods, active=True).select_related("node", "pod")
    )
    released = [str(a.pod.uid) for a in allocations]
    _release(allocations, reason=f"preempted: {reason}"[:256], now=now)
    placed = [p for p in pods if p.phase in Pod.PLACED_PHASES]
    for pod in pods:
        pod.phase = Pod.Phase.PENDING
        pod.bound_at = None
        pod.started_at = None
        pod.next_attempt_at = None
        pod.last_reason = f"Preempted: {reason}"[:1024]
        pod.simulation.pop("lost_s", None)  # it starts over
    Pod.objects.bulk_update(
        pods, ["phase", "bound_at", "started_at", "next_attempt_at", "last_reason", "simulation"]
    )
    payloads: list[events.EventPayload] = []
    by_workload: dict[int, list[str]] = defaultdict(list)
    for pod in pods:
        by_workload[pod.workload_id].append(pod.name)
    for w in rows:
        old_queue = w.cluster_queue.name if w.cluster_queue else ""
        payloads.append(
            events.WorkloadEvicted(
                uid=str(w.uid),
                tenant=w.tenant.name,
                name=w.name,
                queue=w.queue_name,
                cluster_queue=old_queue,
                reason=reason,
                preemptor=str(preemptor.uid) if preemptor else "",
                pods=sorted(by_workload[w.pk]),
            )
        )
        w.state, w.admitted_at, w.cluster_queue = Workload.State.PENDING, None, None
        w.flavors, w.quota_usage, w.node_selector, w.tolerations = {}, {}, {}, []
        w.pending_reason, w.reason = "Preempted", reason[:1024]
        w.evictions += 1
        w.evicted_at = now
    Workload.objects.bulk_update(
        rows,
        [
            "state",
            "admitted_at",
            "cluster_queue",
            "flavors",
            "quota_usage",
            "node_selector",
            "tolerations",
            "pending_reason",
            "reason",
            "evictions",
            "evicted_at",
        ],
    )
    payloads += [events.PodPhaseChanged.of(p, phase=Pod.Phase.PENDING) for p in placed]
    payloads += [_workload_event(w) for w in rows]
    return payloads, released, {w.pk for w in rows}


def workloads_waiting(*, updates: Sequence[tuple[Workload, str, str]]) -> int:
    """Record why workloads wait (a reason code and its message); an event for each change."""
    changed = []
    for workload, code, message in updates:
        message = message[:1024]
        if (workload.pending_reason, workload.reason) != (code, message):
            workload.pending_reason, workload.reason = code, message
            changed.append(workload)
    if not changed:
        return 0
    with transaction.atomic():
        Workload.objects.bulk_update(changed, ["pending_reason", "reason"])
        events.publish(*(_workload_event(w) for w in changed))
    return len(changed)


# --- binding ----------------------------------------------------------------------------------


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
    moved = Pod.objects.filter(pk__in=[p.pk for p in pods], phase=Pod.Phase.PENDING).update(
        phase=Pod.Phase.BOUND,
        bound_at=now,
        attempts=F("attempts") + 1,
        last_attempt_at=now,
        last_reason="",
        next_attempt_at=None,
    )
    if moved != len(pods):
        raise _Conflict(f"{len(pods) - moved} pod(s) were bound or cancelled by someone else")
    Workload.objects.filter(pk__in={p.workload_id for p in pods}).exclude(pending_reason="").update(
        pending_reason="", reason=""
    )

    records = PlacementDecision.objects.bulk_create(
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
    allocations = Allocation.objects.bulk_create(
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
    GpuAssignment.objects.bulk_create(assignments)
    # Increments, not absolute values: the CHECK constraints then judge the true totals even if
    # another writer changed them since our snapshot.
    _add(Node, "cpu_used_milli", cpu_delta)
    _add(Node, "memory_used_mib", memory_delta)
    _add(Gpu, "used_milli", gpu_delta)
    _add(Gpu, "lent_milli", lent_delta)
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


def _add(model: type[Node] | type[Gpu], column: str, deltas: dict[int, int]) -> None:
    deltas = {pk: d for pk, d in deltas.items() if d}
    if not deltas:
        return
    increment = Case(
        *(When(pk=pk, then=Value(delta)) for pk, delta in deltas.items()),
        default=Value(0),
        output_field=IntegerField(),
    )
    model.objects.filter(pk__in=list(deltas)).update(**{column: F(column) + increment})


def pods_unschedulable(*, failed: Sequence[tuple[Pod, Decision]], now: datetime) -> None:
    """Record a failed attempt: backoff grows with attempts; an event when the reason changes."""
    if not failed:
        return
    changed: list[tuple[Pod, Decision]] = []
    for pod, decision in failed:
        reason = decision.summary()[:1024]
        if reason != pod.last_reason:
            changed.append((pod, decision))
        pod.attempts += 1
        pod.last_reason = reason
        pod.last_attempt_at = now
        pod.next_attempt_at = now + timedelta(
            seconds=min(MAX_BACKOFF_S, 0.5 * 2 ** min(pod.attempts, 8))
        )
    with transaction.atomic():
        Pod.objects.bulk_update(
            [pod for pod, _ in failed],
            ["attempts", "last_reason", "last_attempt_at", "next_attempt_at"],
        )
        PlacementDecision.objects.bulk_create(
            [
                PlacementDecision(
                    pod=pod,
                    outcome=decision.status.code.value,
                    summary=pod.last_reason,
                    explanation=explanation(decision),
                )
                for pod, decision in changed
            ]
        )
        events.publish(
            *(
                events.PodUnschedulable.of(
                    pod,
                    reason=pod.last_reason,
                    attempts=pod.attempts,
                )
                for pod, _ in changed
            )
        )


def explanation(decision: Decision) -> dict[str, Any]:
    """What the API and dashboard show for a decision: counts, the best candidates' per-plugin
    scores and, for the chosen node, every plugin's verdict."""
    doc: dict[str, Any] = {
        "nodes": len(decision.node_names),
        "feasible": decision.feasible_nodes,
        "summary": decision.summary(),
        "candidates": [],
    }
    if len(decision.candidates):
        order = np.argsort(-decision.totals, kind="stable")[:EXPLAINED_CANDIDATES]
        doc["candidates"] = [
            {
                "node": decision.node_names[int(decision.candidates[j])],
                "total": round(float(decision.totals[j]), 3),
                "scores": {r.plugin: round(float(r.scores[j]), 3) for r in decision.scores},
                "weights": {r.plugin: r.weight for r in decision.scores},
            }
            for j in order
        ]
    if decision.node:
        doc["chosen"] = decision.explain(decision.node)
    return doc


# --- running, finishing, releasing ------------------------------------------------------------


def pods_start(*, pods: Sequence[Pod], now: datetime) -> None:
    """The simulator (or kubelet) started bound pods."""
    if not pods:
        return
    with transaction.atomic():
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
            *(_workload_event(workloads[pk]) for pk in newly_running),
        )


def pods_finish(*, pods: Sequence[Pod], now: datetime, succeeded: bool = True) -> None:
    """Pods ended: their allocations are released and finished workloads are closed."""
    if not pods:
        return
    phase = Pod.Phase.SUCCEEDED if succeeded else Pod.Phase.FAILED
    with transaction.atomic():
        _release(
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
            *(_workload_event(w) for w in done),
        )


def _release(allocations: Iterable[Allocation], *, reason: str, now: datetime) -> None:
    """Give back what allocations hold: counters down, rows inactive, one event each."""
    allocations = list(allocations)
    if not allocations:
        return
    ids = [a.pk for a in allocations]
    assignments = list(
        GpuAssignment.objects.filter(allocation_id__in=ids, active=True).select_related("gpu")
    )
    gpu_delta: dict[int, int] = defaultdict(int)
    lent_delta: dict[int, int] = defaultdict(int)
    for assignment in assignments:
        (lent_delta if assignment.reclaimed else gpu_delta)[assignment.gpu_id] -= assignment.milli
    cpu_delta: dict[int, int] = defaultdict(int)
    memory_delta: dict[int, int] = defaultdict(int)
    for allocation in allocations:
        cpu_delta[allocation.node_id] -= allocation.cpu_milli
        memory_delta[allocation.node_id] -= allocation.memory_mib
    GpuAssignment.objects.filter(pk__in=[a.pk for a in assignments]).update(active=False)
    Allocation.objects.filter(pk__in=ids).update(
        state=Allocation.State.RELEASED, active=False, released_at=now, release_reason=reason
    )
    _add(Gpu, "used_milli", gpu_delta)
    _add(Gpu, "lent_milli", lent_delta)
    _add(Node, "cpu_used_milli", cpu_delta)
    _add(Node, "memory_used_mib", memory_delta)
    gpus_of: dict[int, list[int]] = defaultdict(list)
    for assignment in assignments:
        gpus_of[assignment.allocation_id].append(assignment.gpu.index)
    events.publish(
        *(
            events.AllocationReleased(
                pod_uid=str(a.pod.uid), node=a.node.name, gpus=sorted(gpus_of[a.pk]), reason=reason
            )
            for a in allocations
        )
    )
    _promote_lent(gpu_ids=[gpu_id for gpu_id, delta in gpu_delta.items() if delta])


def _promote_lent(*, gpu_ids: Sequence[int]) -> None:
    """Where owners left and a GPU now lends more than its owners hold, lent shares move onto
    the free capacity (smallest first, while they fit): with nobody left to lend them the
    capacity, they would otherwise sit on free milli that a new owner could be given."""
    for gpu in Gpu.objects.filter(pk__in=gpu_ids, lent_milli__gt=F("used_milli")):
        lent = GpuAssignment.objects.filter(gpu=gpu, active=True, reclaimed=True).select_related(
            "allocation__pod", "allocation__node"
        )
        used, lent_milli = gpu.used_milli, gpu.lent_milli
        promoted: list[GpuAssignment] = []
        for assignment in sorted(lent, key=lambda a: (a.milli, a.pk)):
            if lent_milli <= used or used + assignment.milli > MILLI_PER_GPU:
                break
            used, lent_milli = used + assignment.milli, lent_milli - assignment.milli
            promoted.append(assignment)
        if not promoted:
            continue
        GpuAssignment.objects.filter(pk__in=[a.pk for a in promoted]).update(reclaimed=False)
        moved = sum(a.milli for a in promoted)
        Gpu.objects.filter(pk=gpu.pk).update(
            used_milli=F("used_milli") + moved, lent_milli=F("lent_milli") - moved
        )
        events.publish(
            *(
                events.AllocationPromoted(
                    pod_uid=str(a.allocation.pod.uid), node=a.allocation.node.name, gpu=gpu.index
                )
                for a in promoted
            )
        )


def reservations_expire(*, now: datetime) -> int:
    """Release reservations whose time ran out (a gang that never completed, a crashed binder)."""
    with transaction.atomic():
        expired = list(
            Allocation.objects.filter(
                state=Allocation.State.RESERVED, expires_at__lt=now
            ).select_related("node", "pod")
        )
        _release(expired, reason="reservation expired", now=now)
        Pod.objects.filter(pk__in=[a.pod_id for a in expired]).update(phase=Pod.Phase.PENDING)
    return len(expired)


def decisions_prune(*, keep: int) -> int:
    """Keep the newest `keep` decision records."""
    cutoff = PlacementDecision.objects.order_by("-id").values_list("id", flat=True)[keep : keep + 1]
    boundary = list(cutoff)
    if not boundary:
        return 0
    deleted, _ = PlacementDecision.objects.filter(id__lte=boundary[0]).delete()
    return deleted


# --- leader election --------------------------------------------------------------------------


def lease_acquire(*, name: str, holder: str, duration_s: float, now: datetime) -> bool:
    """Take or renew the lease; True while `holder` leads. A conditional UPDATE, so two candidates
    can never both win: the row changes only if we hold it already or its holder let it expire."""
    Lease.objects.get_or_create(name=name, defaults={"duration_s": duration_s})
    expired_before = now - timedelta(seconds=duration_s)
    renewed = Lease.objects.filter(name=name, holder=holder).update(
        renewed_at=now, duration_s=duration_s
    )
    if renewed:
        return True
    taken = Lease.objects.filter(
        Q(holder="") | Q(renewed_at__isnull=True) | Q(renewed_at__lt=expired_before), name=name
    ).update(
        holder=holder,
        renewed_at=now,
        acquired_at=now,
        duration_s=duration_s,
        transitions=F("transitions") + 1,
    )
    if taken:
        logger.info("lease %s acquired by %s", name, holder)
    return bool(taken)


def lease_release(*, name: str, holder: str) -> None:
    Lease.objects.filter(name=name, holder=holder).update(holder="", renewed_at=None)
