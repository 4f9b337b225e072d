"""Writes for the Kubernetes side: the cluster's nodes and pods mirrored into the shared models,
always through scheduling.services (the only writers of its rows and publishers of the outbox
events: tests/test_architecture.py), plus kube's own rows, the KubePod mapping.

Pods pending for our schedulerName become Workloads (origin `mirrored`): one per pod, or one per
pod group (kube.groups), Pending until admission reserves their quota. A pod someone else bound (or
one bound before we started) is mirrored too, bound where it runs, so what it holds is counted. A
workload submitted to gpusched (REST API) becomes real pods (kube.materialize), each linked here to
its Pod row.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction

from kube.models import KubeJob, KubePod
from kube.translate import PodInfo
from scheduling import services
from scheduling.bulk import insert_rows
from scheduling.core.queueing.config import QueueConfig
from scheduling.core.types import NodeSpec
from scheduling.models import (
    Node,
    Pod,
    PriorityClass,
    QueueSource,
    Tenant,
    Workload,
)

if TYPE_CHECKING:
    from kube.jobs import JobShape

logger = logging.getLogger(__name__)

POD_SET = "pods"
# Workloads whose pods are made again when they wait again (by gpusched, or by their Job).
OWN_PODS = (Workload.Origin.SUBMITTED, Workload.Origin.JOB)


def nodes_apply(*, specs: Sequence[NodeSpec]) -> int:
    """The cluster's nodes as listed or changed, in one transaction (a first list of thousands
    of nodes goes in by a few bulk inserts: scheduling.services.nodes_register)."""
    return services.nodes_register(specs=specs, source=Node.Source.KUBERNETES)


def node_gone(*, name: str) -> None:
    """A node left the cluster: nothing more is placed on it (its pods are deleted by Kubernetes
    and released as they go)."""
    node = Node.objects.filter(name=name, source=Node.Source.KUBERNETES).first()
    if node is not None and not node.cordoned:
        services.node_set_cordoned(node=node, cordoned=True)


def tenant_for_namespace(namespace: str) -> Tenant:
    """The namespace's tenant; an unknown namespace gets a tenant of its own name (docs/
    kubernetes.md: its pods still need a LocalQueue once cluster queues are configured)."""
    tenant = Tenant.objects.filter(namespace=namespace).first()
    if tenant is not None:
        return tenant
    name = namespace if not Tenant.objects.filter(name=namespace).exists() else f"k8s-{namespace}"
    return services.tenant_create(name=name[:63], namespace=namespace)


@dataclass(frozen=True)
class MirrorGroup:
    """Pods pending for us that become one workload: a pod on its own, or a pod group (a gang
    when `min_count` is set)."""

    name: str
    members: Sequence[PodInfo]
    min_count: int | None = None


def workload_mirror(
    *,
    name: str,
    members: Sequence[PodInfo],
    min_count: int | None,
    workload_classes: bool = True,
) -> list[Pod]:
    """Pods pending for us as one Pending workload (a gang when `min_count` is set), each pod a
    Pod row of its own name and shape, mapped to its uid. `workload_classes`: gpusched admits, so
    Kueue's priority-class label gives the priority (beside Kueue it does not: _priority_of)."""
    return workloads_mirror(
        groups=[MirrorGroup(name, members, min_count)], workload_classes=workload_classes
    )


def workloads_mirror(*, groups: Sequence[MirrorGroup], workload_classes: bool = True) -> list[Pod]:
    """Several groups as `workload_mirror` makes each, in one transaction and a few statements
    (a burst of new pods): all or none. A workload name a tenant has already gets the first
    pod's uid as a suffix."""
    tenants = {ns: tenant_for_namespace(ns) for ns in {g.members[0].namespace for g in groups}}
    with transaction.atomic():
        bases = [(tenants[g.members[0].namespace], g.name[:200]) for g in groups]
        taken = set(
            Workload.objects.filter(
                tenant__in={t.pk for t, _ in bases}, name__in={name for _, name in bases}
            ).values_list("tenant_id", "name")
        )
        specs = []
        for group, (tenant, base) in zip(groups, bases, strict=True):
            first = group.members[0]
            specs.append(
                services.WorkloadSpec(
                    tenant=tenant,
                    name=f"{base}-{first.uid[:8]}" if (tenant.pk, base) in taken else base,
                    pod_sets=[_pod_set(group.members, group.min_count)],
                    queue_name=first.queue_name[:63],
                    **_priority_of(first, workload_classes=workload_classes),
                    preemption_policy=_preemption_policy(first),
                    service_class=first.service_class,
                    origin=Workload.Origin.MIRRORED,
                    maximum_execution_time_s=_declared_limit(group.members),
                    cluster_managed=True,
                )
            )
        pods = services.workloads_submit_pods(specs=specs)
        _link(pods, [member for group in groups for member in group.members])
    return pods


def workload_join(*, workload: Workload, members: Sequence[PodInfo]) -> list[Pod]:
    """Pods of a group whose workload exists already (a later member, or a replacement a
    controller created for an evicted one)."""
    with transaction.atomic():
        pods = services.workload_extend(workload=workload, pod_set=_pod_set(members, None))
        rows = list(
            Pod.objects.filter(pk__in=[p.pk for p in pods])
            .select_related("workload__tenant")
            .order_by("id")
        )
        services.pods_cluster_managed(pods=rows)
        _link(rows, members)
    return rows


def _pod_set(members: Sequence[PodInfo], min_count: int | None) -> services.PodSetSpec:
    asks = [(m.name, m.ask) for m in members if m.ask is not None]
    return services.PodSetSpec(
        name=POD_SET,
        count=len(asks),
        template=asks[0][1],
        min_count=min_count,
        members=tuple(asks),
        topology=members[0].topology,
    )


def _link(pods: Sequence[Pod], members: Sequence[PodInfo]) -> None:
    """Each pod, which the cluster runs, mapped to its cluster pod."""
    by_name = {(m.namespace, m.name): m for m in members}
    insert_rows(
        [
            _kube_pod(pod, by_name[(pod.workload.tenant.namespace, pod.name)], owned=True)
            for pod in pods
        ]
    )


def _kube_pod(pod: Pod, info: PodInfo, *, owned: bool) -> KubePod:
    """The row saying `pod` is the cluster's pod `info`."""
    return KubePod(
        uid=info.uid,
        namespace=info.namespace,
        name=info.name,
        pod=pod,
        scheduler_name=info.scheduler_name,
        owned=owned,
    )


def _priority(info: PodInfo) -> int | None:
    """spec.priority as the API server resolved it; else the named class's value (a cluster
    without the Priority admission plugin), else the default."""
    if info.priority is not None:
        return info.priority
    if info.priority_class_name:
        known = PriorityClass.objects.filter(name=info.priority_class_name).first()
        if known is not None:
            return known.value
    return None


def _declared_limit(members: Sequence[PodInfo]) -> int | None:
    """The longest a group runs by its pods' activeDeadlineSeconds (the kubelet stops each pod
    after its own): the largest, when every pod declares one; run-time estimates take it as the
    workload's maximumExecutionTimeSeconds before similar work has finished (issue 37)."""
    limits = [m.active_deadline_s for m in members]
    if not limits or None in limits:
        return None
    return max(x for x in limits if x is not None)


def _priority_of(info: PodInfo, *, workload_classes: bool) -> dict[str, Any]:
    """workload_submit's priority arguments: with Kueue's label `kueue.x-k8s.io/priority-class`
    its WorkloadPriorityClass gives the priority (one that does not exist is a ServiceError naming
    it), else the pod's own. Without `workload_classes` (beside Kueue, whose WorkloadPriorityClass
    orders only its own queues, "without affecting the pod's priority": Kueue's
    site/content/en/docs/concepts/workload_priority_class.md) always the pod's own."""
    if info.workload_priority_class and workload_classes:
        return {
            "priority": None,
            "priority_class_name": info.workload_priority_class[:63],
            "priority_class_kind": PriorityClass.Kind.WORKLOAD.value,
        }
    return {"priority": _priority(info)}


def _preemption_policy(info: PodInfo) -> str:
    return info.preemption_policy or PriorityClass.Preemption.PREEMPT_LOWER_PRIORITY


def workload_mirror_admitted(*, info: PodInfo, workload_classes: bool = True) -> Pod:
    """A pod whose placement someone else decides (bound by another scheduler, or by kube-scheduler
    with gpusched as its extender), as a one-pod workload admitted at once (quota is not ours to
    refuse, nor is its priority: a WorkloadPriorityClass its label names that gpusched does not
    know leaves it the pod's own), mapped to its uid (not ours to place)."""
    assert info.ask is not None
    tenant = tenant_for_namespace(info.namespace)
    known = (
        workload_classes
        and PriorityClass.objects.filter(
            name=info.workload_priority_class, kind=PriorityClass.Kind.WORKLOAD
        ).exists()
    )
    with transaction.atomic():
        workload = services.workload_submit(
            tenant=tenant,
            name=f"{info.name[:200]}-{info.uid[:8]}",
            pod_sets=[
                services.PodSetSpec(
                    POD_SET, 1, info.ask, members=((info.name, info.ask),), topology=info.topology
                )
            ],
            queue_name=info.queue_name[:63],
            **_priority_of(info, workload_classes=known),
            preemption_policy=_preemption_policy(info),
            service_class=info.service_class,
            origin=Workload.Origin.MIRRORED,
            maximum_execution_time_s=info.active_deadline_s,
        )
        services.workloads_admit(workloads=[workload], now=workload.created_at)
        pod = workload.pods.select_related("workload__tenant", "constraints").get()
        _link_one(pod, info, owned=False)
    return pod


def queues_mirror(
    *, config: QueueConfig, fair_sharing: bool, notes: Sequence[str], now: datetime
) -> services.QueuesReplaced:
    """Kueue's objects in the cluster as the queues (kube.kueue), and the source's state, in one
    transaction: the API and the dashboard never show a source that disagrees with its queues."""
    with transaction.atomic():
        replaced = services.queues_replace(config=config, fair_sharing=fair_sharing, now=now)
        kept = [
            f"ClusterQueue {name} is gone from the cluster: kept, admitting nothing, until its "
            "admitted workloads are gone (Kueue's resource-in-use finalizer)"
            for name in replaced.terminating
        ]
        services.queue_source_record(
            kind=QueueSource.Kind.CLUSTER, now=now, applied=True, notes=[*notes, *kept]
        )
    return replaced


def job_workload(*, namespace: str, job_name: str, shape: JobShape) -> Workload:
    """A suspended batch/v1 Job as one Pending workload of one pod set (a gang when Indexed),
    and the Job remembered with its template's scheduling directives (kube.jobs)."""
    info = shape.info
    assert info.ask is not None
    tenant = tenant_for_namespace(namespace)
    with transaction.atomic():
        workload = services.workload_submit(
            tenant=tenant,
            name=f"job-{job_name[:190]}-{info.uid[:5]}",
            pod_sets=[
                services.PodSetSpec(
                    "main",
                    shape.count,
                    info.ask,
                    min_count=shape.count if shape.indexed else None,
                    members=tuple((name, info.ask) for name in shape.names),
                    topology=info.topology,
                )
            ],
            queue_name=info.queue_name[:63],
            **_priority_of(info, workload_classes=True),
            preemption_policy=_preemption_policy(info),
            service_class=info.service_class,
            origin=Workload.Origin.JOB,
            maximum_execution_time_s=info.active_deadline_s,
        )
        KubeJob.objects.create(
            uid=info.uid,
            namespace=namespace,
            name=job_name,
            workload=workload,
            node_selector=shape.node_selector,
            tolerations=shape.tolerations,
        )
    return workload


def job_finished(*, workload: Workload, succeeded: bool, now: datetime) -> None:
    """The Job's Complete or Failed condition: its workload ends so (what its pods still hold is
    free: a Job is terminal once its pods are)."""
    pods = list(workload.pods.filter(phase__in=Pod.ACTIVE_PHASES).select_related("workload"))
    services.pods_finish(pods=pods, now=now, succeeded=succeeded)


def kube_pod_link(*, pod: Pod, info: PodInfo) -> KubePod:
    """A pod gpusched made for a submitted workload, now seen in the cluster."""
    return _link_one(pod, info, owned=True)


def _link_one(pod: Pod, info: PodInfo, *, owned: bool) -> KubePod:
    services.pods_cluster_managed(pods=[pod])
    row = _kube_pod(pod, info, owned=owned)
    row.save(force_insert=True)
    return row


def pods_started(*, pods: Sequence[tuple[Pod, datetime | None]], now: datetime) -> None:
    """Bound pods the cluster runs, each with when its kubelet started it (status.startTime;
    None: now): a run time counts from then, not from when the side next saw it (issue 37)."""
    by_start: dict[datetime, list[Pod]] = defaultdict(list)
    for pod, started_at in pods:
        if pod.phase == Pod.Phase.BOUND:
            by_start[_no_later(started_at, now)].append(pod)
    for started_at, started in sorted(by_start.items()):
        services.pods_start(pods=started, now=started_at)


def _no_later(at: datetime | None, now: datetime) -> datetime:
    """A time the cluster reported, never after `now` (another clock may run ahead)."""
    return now if at is None else min(at, now)


def pod_gone(
    *,
    kube_pod: KubePod,
    succeeded: bool,
    now: datetime,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
) -> None:
    """The Kubernetes pod finished, or was deleted: what it holds is free. An evicted pod of a
    submitted workload goes back to the queue, to be made again (its link is dropped). A pod that
    ran and ended between two looks is started and finished at the times its status gives
    (status.startTime, its containers' finishedAt), so a short job's run time is learnt as the
    database side learns it rather than lost (issue 37)."""
    pod = kube_pod.pod
    if pod.phase == Pod.Phase.BOUND and started_at is not None:
        services.pods_start(pods=[pod], now=_no_later(started_at, now))
        pod.phase = Pod.Phase.RUNNING
    if pod.phase == Pod.Phase.TERMINATING:
        services.pods_terminated(pods=[pod], now=now)
        if pod.workload.origin in OWN_PODS:
            kube_pod.delete()  # made again if it waits, forgotten if its workload ended
    elif pod.workload.origin == Workload.Origin.JOB:
        # The Job goes on (its end ends the workload: kube.jobs): the row waits for its next pod.
        services.pods_vacate(pods=[pod], now=now)
        kube_pod.delete()
    elif pod.phase == Pod.Phase.PENDING:
        workload = pod.workload
        others = workload.pods.filter(phase__in=Pod.ACTIVE_PHASES).exclude(pk=pod.pk)
        if workload.state in Workload.ACTIVE_STATES and not others.exists():
            services.workload_cancel(workload=workload, now=now)
        else:
            services.pods_finish(pods=[pod], now=now, succeeded=False)
    elif pod.phase in Pod.ACTIVE_PHASES:
        services.pods_finish(pods=[pod], now=_no_later(finished_at, now), succeeded=succeeded)


def kube_pod_reported(*, kube_pod: KubePod, reason: str) -> None:
    KubePod.objects.filter(pk=kube_pod.pk).update(reported_reason=reason[:1024])
    kube_pod.reported_reason = reason[:1024]
