"""Queue configuration (Kueue-shaped documents) and admission: quota reserved in a cluster
queue."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from scheduling import events
from scheduling.core.queueing.config import ClusterQueue as ClusterQueueSpec
from scheduling.core.queueing.config import QueueConfig, ResourceGroup
from scheduling.models import (
    AdmissionFairSharingSettings,
    ClusterQueue,
    Cohort,
    LocalQueue,
    PriorityClass,
    ResourceFlavor,
    Workload,
)
from scheduling.services import fair_sharing
from scheduling.services.errors import ServiceError
from scheduling.services.workloads import workload_event


def queues_apply(*, config: QueueConfig) -> dict[str, list[str]]:
    """Create or update flavors, cohorts, cluster queues, local queues, priority classes and the
    admission fair sharing settings (Kueue-shaped objects, scheduling.core.queueing.kueue_objects).
    Names are kept; nothing is deleted."""
    stored_parents = {
        name: parent
        for name, parent in Cohort.objects.exclude(
            name__in=[c.name for c in config.cohorts]
        ).values_list("name", "parent_name")
    }
    try:
        config.check_references(
            frozenset(ResourceFlavor.objects.values_list("name", flat=True)), stored_parents
        )
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
        for cohort in config.cohorts:
            Cohort.objects.update_or_create(
                name=cohort.name,
                defaults={
                    "parent_name": cohort.parent,
                    "resource_groups": resource_groups_json(cohort.resource_groups),
                    "fair_sharing_weight": cohort.weight,
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
                    "stop_policy": lq.stop_policy.value,
                },
            )
        for pc in config.priority_classes:
            if pc.global_default:
                PriorityClass.objects.exclude(name=pc.name, kind=pc.kind.value).update(
                    global_default=False
                )
            PriorityClass.objects.update_or_create(
                name=pc.name,
                kind=pc.kind.value,
                defaults={
                    "value": pc.value,
                    "preemption_policy": pc.preemption_policy.value,
                    "description": pc.description[:256],
                    "global_default": pc.global_default,
                },
            )
        fair = config.admission_fair_sharing
        if fair is not None:
            AdmissionFairSharingSettings.objects.update_or_create(
                pk=1,
                defaults={
                    "usage_half_life_s": fair.usage_half_life_s,
                    "usage_sampling_interval_s": fair.usage_sampling_interval_s,
                    "resource_weights": dict(fair.resource_weights),
                },
            )
        names = {
            "flavors": [f.name for f in config.flavors],
            "cohorts": [c.name for c in config.cohorts],
            "cluster_queues": [cq.name for cq in config.cluster_queues],
            "local_queues": [f"{lq.namespace}/{lq.name}" for lq in config.local_queues],
            "priority_classes": [pc.name for pc in config.priority_classes],
        }
        events.publish(events.QueuesChanged(**names))
    return names


def resource_groups_json(groups: Sequence[ResourceGroup]) -> list[dict[str, Any]]:
    """Resource groups Kueue-shaped, amounts canonical (models.ClusterQueue.resource_groups)."""
    return [
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
        for group in groups
    ]


def cluster_queue_fields(cq: ClusterQueueSpec) -> dict[str, Any]:
    """A core ClusterQueue as the model's columns (amounts stay canonical)."""
    return {
        "cohort": cq.cohort,
        "queueing_strategy": cq.queueing_strategy.value,
        "resource_groups": resource_groups_json(cq.resource_groups),
        "within_cluster_queue": cq.preemption.within_cluster_queue.value,
        "reclaim_within_cohort": cq.preemption.reclaim_within_cohort.value,
        "borrow_within_cohort": cq.preemption.borrow_within_cohort.value,
        "borrow_max_priority_threshold": cq.preemption.borrow_max_priority_threshold,
        "fair_sharing_weight": cq.weight,
        "admission_mode": cq.admission_mode.value,
        "stop_policy": cq.stop_policy.value,
        "when_can_borrow": cq.when_can_borrow.value,
        "namespace_selector": [
            [operator, sorted(values)] for operator, values in cq.namespace_selector.requirements
        ],
    }


def toleration_json(t: Any) -> dict[str, str]:
    doc = {"key": t.key, "operator": t.operator, "value": t.value}
    if t.effect is not None:
        doc["effect"] = t.effect.value
    return doc


@dataclass(frozen=True)
class WorkloadAdmission:
    """One decision of an admission cycle: quota reserved in `cluster_queue` with these flavors
    (the victims of quota preemption were evicted before, through the cluster side)."""

    workload: Workload
    cluster_queue: ClusterQueue
    flavors: dict[str, str]
    quota_usage: dict[str, int]  # "flavor|resource" -> canonical amount
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] = field(default_factory=list)


def queue_admit(*, admissions: Sequence[WorkloadAdmission], now: datetime) -> int:
    """Reserve quota for the workloads still pending, in one transaction."""
    if not admissions:
        return 0
    with transaction.atomic():
        admitted: list[Workload] = []
        for admission in admissions:
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
        fair_sharing.local_queue_entry_penalties(admitted=admitted)
        events.publish(*(workload_event(w) for w in admitted))
    return len(admitted)
