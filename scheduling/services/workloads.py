"""Workloads: submit, admit (without queues), cancel, and why they wait."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.utils import timezone

from scheduling import events, pod_resources
from scheduling.bulk import insert_rows, update_rows
from scheduling.core.domains import DomainAsk
from scheduling.core.queueing.admission import INACTIVE_WORKLOAD
from scheduling.core.types import (
    ServiceClass,
)
from scheduling.models import (
    Allocation,
    Pod,
    PodConstraints,
    PriorityClass,
    Tenant,
    Workload,
)
from scheduling.pod_template import PodTemplate
from scheduling.services.allocations import allocations_release
from scheduling.services.errors import ServiceError


@dataclass(frozen=True)
class PodSetSpec:
    name: str
    count: int
    template: PodTemplate
    min_count: int | None = None  # set: a gang of at least this many pods
    # Pods named and shaped one by one (pods mirrored from a cluster, which may differ); empty:
    # `count` pods `<workload>-<set>-<k>` shaped by `template`.
    members: tuple[tuple[str, PodTemplate], ...] = ()
    topology: DomainAsk | None = None  # where across nodes the set goes (core.domains)

    def pods(self, workload: str) -> list[tuple[str, PodTemplate]]:
        if self.members:
            return list(self.members)
        return [(f"{workload}-{self.name}-{k}", self.template) for k in range(self.count)]


@dataclass(frozen=True)
class WorkloadSpec:
    """One new workload, as `workload_submit` takes it."""

    tenant: Tenant
    name: str
    pod_sets: Sequence[PodSetSpec]
    queue_name: str = "default"
    priority: int | None = None
    priority_class_name: str = ""
    priority_class_kind: str = ""
    service_class: ServiceClass = ServiceClass.BATCH
    raw_pod_sets: list[dict[str, Any]] | None = None
    maximum_execution_time_s: int | None = None
    origin: Workload.Origin = Workload.Origin.SUBMITTED
    preemption_policy: str | None = None
    active: bool = True
    # The cluster runs its pods (Kubernetes): they go in as `pods_cluster_managed` marks them.
    cluster_managed: bool = False


def workload_submit(
    *,
    tenant: Tenant,
    name: str,
    pod_sets: Sequence[PodSetSpec],
    queue_name: str = "default",
    priority: int | None = None,
    priority_class_name: str = "",
    priority_class_kind: str = "",
    service_class: ServiceClass = ServiceClass.BATCH,
    raw_pod_sets: list[dict[str, Any]] | None = None,
    maximum_execution_time_s: int | None = None,
    origin: Workload.Origin = Workload.Origin.SUBMITTED,
    preemption_policy: str | None = None,
    active: bool = True,
) -> Workload:
    """A new workload, Pending until its LocalQueue's cluster queue admits it. A priority class
    (by name and kind, else the global default one) sets the priority unless `priority` is
    given, and whether the workload may preempt others unless `preemption_policy` is (a pod's
    own, as the Kubernetes API server resolved it). Without a kind, a WorkloadPriorityClass of
    that name wins over a PriorityClass (as Kueue's label wins over a pod's priorityClassName)."""
    spec = WorkloadSpec(
        tenant,
        name,
        pod_sets,
        queue_name,
        priority,
        priority_class_name,
        priority_class_kind,
        service_class,
        raw_pod_sets,
        maximum_execution_time_s,
        origin,
        preemption_policy,
        active,
    )
    return workloads_submit(specs=[spec])[0]


def workloads_submit(*, specs: Sequence[WorkloadSpec]) -> list[Workload]:
    """New workloads in one transaction, each as `workload_submit` makes it, with a few
    statements for all of them (a burst of pods mirrored from a cluster): all or none."""
    return _submit(specs)[0]


def workloads_submit_pods(*, specs: Sequence[WorkloadSpec]) -> list[Pod]:
    """`workloads_submit`, answering the pods it made, in the specs' order, each with its
    workload and the workload's tenant (what a burst of mirrored pods is linked by, without
    reading thousands of rows back)."""
    return _submit(specs)[1]


def _submit(specs: Sequence[WorkloadSpec]) -> tuple[list[Workload], list[Pod]]:
    if any(not spec.pod_sets for spec in specs):
        raise ServiceError("a workload needs at least one pod set")
    if not specs:
        return [], []
    with transaction.atomic():
        wanted = {(spec.tenant.pk, spec.name) for spec in specs}
        if len(wanted) < len(specs):
            raise ServiceError("two of the workloads have the same tenant and name")
        taken = Workload.objects.filter(
            tenant__in={spec.tenant.pk for spec in specs}, name__in={name for _, name in wanted}
        ).values_list("tenant_id", "name")
        for tenant_id, name in taken:
            if (tenant_id, name) in wanted:
                tenant = next(s.tenant for s in specs if s.tenant.pk == tenant_id)
                raise ServiceError(f"workload {name!r} already exists for tenant {tenant.name}")
        classes = _priority_classes(specs)
        workloads = insert_rows([_workload_row(spec, classes[_class_key(spec)]) for spec in specs])
        pods = [
            (workload, pod_set, name, template, spec.cluster_managed)
            for workload, spec in zip(workloads, specs, strict=True)
            for pod_set in spec.pod_sets
            for name, template in pod_set.pods(workload.name)
        ]
        constraints = _Constraints([template for _, _, _, template, _ in pods])
        rows = insert_rows([_pod_row(*pod, constraints) for pod in pods])
        events.publish(*(workload_event(w) for w in workloads))
    return workloads, rows


def _priority_classes(
    specs: Sequence[WorkloadSpec],
) -> dict[tuple[str, str], PriorityClass | None]:
    """Each spec's (class name, kind) -> its class: the named one (a ServiceError if it does not
    exist), else the global default one; one read per distinct class."""
    found: dict[tuple[str, str], PriorityClass | None] = {}
    for spec in specs:
        key = _class_key(spec)
        if key in found:
            continue
        if spec.priority_class_name:
            chosen = priority_class_named(*key)
            if chosen is None:
                kind = spec.priority_class_kind or "priority class"
                raise ServiceError(f"{kind} {spec.priority_class_name!r} does not exist")
        else:
            chosen = PriorityClass.objects.filter(global_default=True).first()
        found[key] = chosen
    return found


def _class_key(spec: WorkloadSpec) -> tuple[str, str]:
    """(name, kind) of the class a spec names; ("", "") for the global default one."""
    name = spec.priority_class_name
    return (name, spec.priority_class_kind) if name else ("", "")


def _workload_row(spec: WorkloadSpec, priority_class: PriorityClass | None) -> Workload:
    priority = spec.priority
    if priority is None:
        priority = priority_class.value if priority_class else 0
    return Workload(
        tenant=spec.tenant,
        name=spec.name,
        queue_name=spec.queue_name,
        priority=priority,
        priority_class_name=priority_class.name if priority_class else "",
        priority_class_kind=priority_class.kind if priority_class else "",
        active=spec.active,
        preemption_policy=spec.preemption_policy
        or (
            priority_class.preemption_policy
            if priority_class
            else PriorityClass.Preemption.PREEMPT_LOWER_PRIORITY
        ),
        maximum_execution_time_s=spec.maximum_execution_time_s,
        service_class=spec.service_class.value,
        origin=spec.origin,
        pod_sets=spec.raw_pod_sets
        if spec.raw_pod_sets is not None
        else [_pod_set_json(s) for s in spec.pod_sets],
    )


def priority_class_named(name: str, kind: str = "") -> PriorityClass | None:
    """The class of that name (and kind); without a kind, WorkloadPriorityClass first."""
    rows = PriorityClass.objects.filter(name=name)
    if kind:
        rows = rows.filter(kind=kind)
    found = {row.kind: row for row in rows}
    return found.get(PriorityClass.Kind.WORKLOAD) or found.get(PriorityClass.Kind.POD)


def workload_extend(*, workload: Workload, pod_set: PodSetSpec) -> list[Pod]:
    """More pods for a workload's pod set (a pod group whose later members were just created)."""
    with transaction.atomic():
        members = pod_set.pods(workload.name)
        constraints = _Constraints([template for _, template in members])
        pods = insert_rows(
            [
                _pod_row(workload, pod_set, name, template, False, constraints)
                for name, template in members
            ]
        )
        doc = [dict(s) for s in workload.pod_sets]
        for entry in doc:
            if entry.get("name") == pod_set.name:
                entry["count"] = int(entry.get("count") or 0) + len(pods)
        Workload.objects.filter(pk=workload.pk).update(pod_sets=doc)
        workload.pod_sets = doc
        events.publish(workload_event(workload))
    return pods


class _Constraints:
    """The PodConstraints row of each template of one write, by the template's identity: a pod
    set's pods share their template, so its digest is taken once, not once a pod."""

    def __init__(self, templates: Sequence[PodTemplate]) -> None:
        distinct = {id(t): t for t in templates}
        self.digests = {key: t.constraints_digest for key, t in distinct.items()}
        self.ids = pod_constraints_ids(
            {self.digests[key]: t for key, t in distinct.items()}.values()
        )

    def id_of(self, template: PodTemplate) -> int:
        return self.ids[self.digests[id(template)]]


def pod_constraints_ids(templates: Iterable[PodTemplate]) -> dict[str, int]:
    """The PodConstraints row of each template's constraints, by digest: found, or written once
    (a concurrent writer of the same content wins the unique digest and its row is used)."""
    rows = {
        t.constraints_digest: PodConstraints(
            digest=t.constraints_digest,
            node_selector=dict(t.node_selector),
            tolerations=[dict(x) for x in t.tolerations],
            gpu_models=list(t.gpu_models),
        )
        for t in templates
    }
    found = dict(PodConstraints.objects.filter(digest__in=list(rows)).values_list("digest", "id"))
    missing = [row for digest, row in rows.items() if digest not in found]
    if missing:
        PodConstraints.objects.bulk_create(missing, ignore_conflicts=True)
        found |= dict(
            PodConstraints.objects.filter(digest__in=[row.digest for row in missing]).values_list(
                "digest", "id"
            )
        )
    return found


def _pod_row(
    workload: Workload,
    pod_set: PodSetSpec,
    name: str,
    t: PodTemplate,
    cluster_managed: bool,
    constraints: _Constraints,
) -> Pod:
    return Pod(
        workload=workload,
        cluster_managed=cluster_managed,
        name=name,
        pod_set=pod_set.name,
        priority=workload.priority,
        service_class=workload.service_class,
        **pod_resources.row_fields(t.resources),
        topology_policy=t.topology_policy.value if t.topology_policy else "",
        topology_scope=t.topology_scope.value if t.topology_scope else "",
        constraints_id=constraints.id_of(t),
        gang_min_count=pod_set.min_count or 0,
        topology_request=pod_set.topology.json() if pod_set.topology else {},
    )


def _pod_set_json(pod_set: PodSetSpec) -> dict[str, Any]:
    return {"name": pod_set.name, "count": pod_set.count, "minCount": pod_set.min_count}


def workloads_lock(ids: Iterable[int]) -> None:
    """Lock workload rows by id (`FOR NO KEY UPDATE`), in the caller's transaction: the first
    step of the one lock order (docs/architecture.md) for every writer that changes a workload's
    pods (eviction, cancel, bind, a pod starting, ending or gone)."""
    list(
        Workload.objects.filter(pk__in=set(ids))
        .select_for_update(no_key=True)
        .order_by("id")
        .values_list("pk", flat=True)
    )


def workload_event(workload: Workload) -> events.WorkloadChanged:
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
        events.publish(*(workload_event(w) for w in admitted))
    return len(admitted)


def workload_cancel(*, workload: Workload, now: datetime | None = None) -> Workload:
    now = now or timezone.now()
    with transaction.atomic():
        # The lock order of scheduling/services/evictions.py: the workload row first, then its
        # pods by id. An eviction of this workload running meanwhile commits first (and the
        # cancel then sees it pending) or waits here; neither holds what the other waits for.
        locked = Workload.objects.select_for_update(no_key=True).filter(pk=workload.pk)
        workload.state = next(iter(locked.values_list("state", flat=True)), workload.state)
        if workload.state not in Workload.ACTIVE_STATES:
            raise ServiceError(f"workload {workload.name} is already {workload.state}")
        # Locked: a scheduler binding one of these pods meanwhile commits first and its
        # allocation is released here, or finds the pod cancelled; read unlocked, the bind's
        # allocation would outlive the cancel and hold its GPUs forever.
        pods = list(
            workload.pods.filter(phase__in=Pod.ACTIVE_PHASES)
            .only("uid", "name", "phase", "workload_id", "cluster_managed")
            .select_for_update()
            .order_by("id")
        )
        for pod in pods:
            pod.workload = workload
        # A pod a real cluster runs holds what it holds until the cluster says it is gone.
        staying = {p.pk for p in pods if p.cluster_managed and p.phase in Pod.PLACED_PHASES}
        allocations_release(
            Allocation.objects.filter(pod__in=pods, active=True).exclude(pod_id__in=staying),
            reason="workload cancelled",
            now=now,
        )
        for pod in pods:
            pod.phase = Pod.Phase.TERMINATING if pod.pk in staying else Pod.Phase.CANCELLED
            pod.finished_at = None if pod.pk in staying else now
        update_rows(pods, ["phase", "finished_at"])
        # Nothing holds it back any more: the reason it waited goes with it.
        Workload.objects.filter(pk=workload.pk).update(
            state=Workload.State.CANCELLED, finished_at=now, pending_reason="", reason=""
        )
        workload.state, workload.finished_at = Workload.State.CANCELLED, now
        workload.pending_reason, workload.reason = "", ""
        events.publish(
            *(events.PodPhaseChanged.of(p, phase=p.phase) for p in pods),
            workload_event(workload),
        )
    return workload


def workloads_waiting(*, updates: Sequence[tuple[Workload, str, str]]) -> list[Workload]:
    """Record why workloads wait (a reason code and its message); an event for each change.
    Returns the workloads whose reason changed."""
    changed = []
    for workload, code, message in updates:
        message = message[:1024]
        if (workload.pending_reason, workload.reason) != (code, message):
            workload.pending_reason, workload.reason = code, message
            changed.append(workload)
    if not changed:
        return []
    with transaction.atomic():
        update_rows(changed, ["pending_reason", "reason"])
        events.publish(*(workload_event(w) for w in changed))
    return changed


def workload_set_active(*, workload: Workload, active: bool) -> Workload:
    """Kueue's spec.active. Deactivated, a pending workload is never admitted and an admitted one
    is evicted by the next admission cycle (InactiveWorkload, on either cluster side);
    reactivated, it queues again."""
    with transaction.atomic():
        if workload.state not in Workload.ACTIVE_STATES:
            raise ServiceError(f"workload {workload.name} is already {workload.state}")
        if workload.active == active:
            return workload
        workload.active = active
        fields = ["active"]
        if not active and workload.state == Workload.State.PENDING:
            workload.pending_reason = INACTIVE_WORKLOAD
            workload.reason = "the workload is deactivated (active: false)"
            fields += ["pending_reason", "reason"]
        elif active and workload.pending_reason == INACTIVE_WORKLOAD:
            workload.pending_reason, workload.reason = "", ""
            fields += ["pending_reason", "reason"]
        workload.save(update_fields=fields)
        events.publish(workload_event(workload))
    return workload
