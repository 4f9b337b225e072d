"""Writes for the Kubernetes adapter: Kubernetes nodes and pods mirrored into the shared models,
always through scheduling.services (which publish the outbox events), plus the KubePod mapping.

A pod pending for our schedulerName becomes a one-pod Workload, admitted at once (admission in a
Kubernetes cluster is Kueue's business, through scheduling gates). A pod someone else bound (or one
bound before we started) is mirrored too, bound where it runs, so its CPU, memory and GPUs are
counted.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from django.db import transaction

from kube.models import KubePod
from kube.translate import PodInfo, PodTemplate
from scheduling import events, services
from scheduling.core.scheduler import Decision
from scheduling.core.types import NodeSpec
from scheduling.models import Allocation, Node, Pod, PriorityClass, Tenant, Workload
from scheduling.selectors import ClusterState

logger = logging.getLogger(__name__)

POD_SET = "pod"


def node_apply(*, spec: NodeSpec) -> Node:
    return services.node_register(spec=spec, source=Node.Source.KUBERNETES)


def node_gone(*, name: str) -> None:
    """A node left the cluster: nothing more is placed on it (its pods are deleted by Kubernetes
    and released as they go)."""
    node = Node.objects.filter(name=name, source=Node.Source.KUBERNETES).first()
    if node is not None and not node.cordoned:
        services.node_set_cordoned(node=node, cordoned=True)


def tenant_for_namespace(namespace: str) -> Tenant:
    tenant = Tenant.objects.filter(namespace=namespace).first()
    if tenant is not None:
        return tenant
    name = namespace if not Tenant.objects.filter(name=namespace).exists() else f"k8s-{namespace}"
    return services.tenant_create(name=name[:63], namespace=namespace)


def pod_submit(*, info: PodInfo, ask: PodTemplate, owned: bool, now: datetime) -> Pod:
    """Mirror a Kubernetes pod as a one-pod workload, admitted, and map it to its uid. With the
    label `kueue.x-k8s.io/priority-class` its WorkloadPriorityClass gives the priority (as in
    Kueue); one that does not exist is a ServiceError naming it."""
    tenant = tenant_for_namespace(info.namespace)
    template = ask
    if info.workload_priority_class:
        priority, class_name = None, info.workload_priority_class[:63]
        class_kind = PriorityClass.Kind.WORKLOAD.value
    else:
        priority, class_name, class_kind = info.priority, info.priority_class_name[:63], ""
    with transaction.atomic():
        workload = services.workload_submit(
            tenant=tenant,
            name=f"{info.name[:200]}-{info.uid[:8]}",
            pod_sets=[services.PodSetSpec(name=POD_SET, count=1, template=template)],
            queue_name=info.queue_name[:63],
            priority=priority,
            priority_class_name=class_name,
            priority_class_kind=class_kind,
            service_class=info.service_class,
        )
        services.workloads_admit(workloads=[workload], now=now)
        pod = workload.pods.select_related("workload__tenant").get()
        KubePod.objects.create(
            uid=info.uid,
            namespace=info.namespace,
            name=info.name,
            pod=pod,
            scheduler_name=info.scheduler_name,
            owned=owned,
            node_name=info.node_name,
            resource_version=info.resource_version,
        )
    return pod


def pods_bind(
    *, cluster: ClusterState, placed: Sequence[tuple[Pod, Decision]], scheduler: str, now: datetime
) -> services.CommitResult:
    """Record placements in the database (the over-commit constraints judge them)."""
    return services.placements_commit(cluster=cluster, placed=placed, scheduler=scheduler, now=now)


def pod_requeue(*, pod: Pod, reason: str, now: datetime, backoff_s: float = 1.0) -> None:
    """The API server refused the binding (409: bound elsewhere meanwhile, or the pod changed):
    give back what the database reserved and put the pod back in the queue after a short backoff.
    """
    with transaction.atomic():
        allocations = Allocation.objects.filter(pod=pod, active=True).select_related("node", "pod")
        services._release(allocations, reason=f"bind refused: {reason}"[:256], now=now)
        Pod.objects.filter(pk=pod.pk).update(
            phase=Pod.Phase.PENDING,
            bound_at=None,
            last_reason=reason[:1024],
            last_attempt_at=now,
            next_attempt_at=now + timedelta(seconds=backoff_s),
        )
        pod.phase = Pod.Phase.PENDING
        events.publish(events.PodPhaseChanged.of(pod, phase=Pod.Phase.PENDING))


def pods_started(*, pods: Sequence[Pod], now: datetime) -> None:
    services.pods_start(pods=[p for p in pods if p.phase == Pod.Phase.BOUND], now=now)


def pod_gone(*, pod: Pod, succeeded: bool, now: datetime) -> None:
    """The Kubernetes pod finished or was deleted: release what it holds."""
    if pod.phase == Pod.Phase.PENDING:
        workload = pod.workload
        if workload.state in Workload.ACTIVE_STATES:
            services.workload_cancel(workload=workload, now=now)
    elif pod.phase in Pod.ACTIVE_PHASES:
        services.pods_finish(pods=[pod], now=now, succeeded=succeeded)


def kube_pod_seen(*, kube_pod: KubePod, info: PodInfo) -> None:
    """Remember the newest node name and resourceVersion seen for a mirrored pod."""
    if (kube_pod.node_name, kube_pod.resource_version) != (info.node_name, info.resource_version):
        KubePod.objects.filter(pk=kube_pod.pk).update(
            node_name=info.node_name, resource_version=info.resource_version
        )
        kube_pod.node_name, kube_pod.resource_version = info.node_name, info.resource_version


def kube_pod_reported(*, kube_pod: KubePod, reason: str) -> None:
    KubePod.objects.filter(pk=kube_pod.pk).update(reported_reason=reason[:1024])
    kube_pod.reported_reason = reason[:1024]
