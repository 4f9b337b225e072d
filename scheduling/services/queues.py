"""Queue configuration (Kueue-shaped documents) and admission: quota reserved in a cluster
queue."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import transaction

from scheduling import events
from scheduling.core.queueing.config import ClusterQueue as ClusterQueueSpec
from scheduling.core.queueing.config import ConsolidationPolicy, QueueConfig, ResourceGroup
from scheduling.core.queueing.kueue_fields import CONSOLIDATION_ANNOTATION
from scheduling.core.queueing.resources import format_quantity
from scheduling.models import (
    AdmissionFairSharingSettings,
    ClusterQueue,
    Cohort,
    LocalQueue,
    PriorityClass,
    QueueSource,
    ResourceFlavor,
    Topology,
    Workload,
)
from scheduling.selectors import cohorts as queue_selectors
from scheduling.services import fair_sharing
from scheduling.services.audit import admin_action_record
from scheduling.services.errors import FieldErrors, ServiceError
from scheduling.services.workloads import workload_event


def queues_apply(*, config: QueueConfig) -> dict[str, list[str]]:
    """Create or update flavors, cohorts, cluster queues, local queues, priority classes and the
    admission fair sharing settings (Kueue-shaped objects, scheduling.core.queueing.kueue_objects).
    Names are kept; nothing is deleted (a mirror of a cluster's objects: queue_sources)."""
    stored_parents = {
        name: parent
        for name, parent in Cohort.objects.exclude(
            name__in=[c.name for c in config.cohorts]
        ).values_list("name", "parent_name")
    }
    check_config(
        config,
        known_flavors=frozenset(ResourceFlavor.objects.values_list("name", flat=True)),
        known_parents=stored_parents,
        known_queues=frozenset(ClusterQueue.objects.values_list("name", flat=True)),
        known_topologies=frozenset(Topology.objects.values_list("name", flat=True)),
    )
    with transaction.atomic():
        names = config_write(config)
        events.publish(events.QueuesChanged(**names))
    return names


def refuse_when_mirrored(
    name: str,
    groups: Sequence[Mapping[str, Any]],
    changes: Mapping[tuple[str, str], Mapping[str, int | None]],
) -> None:
    """Quota is changed here only while the queues are the database's: a cluster's next apply
    would undo a change made here. Refused otherwise, with the kubectl command that makes the
    change on the cluster's ClusterQueue (a JSON patch of spec.resourceGroups)."""
    source = queue_selectors.queue_source().kind
    if source == QueueSource.Kind.DATABASE:
        return
    ops: list[dict[str, Any]] = []
    for gi, group in enumerate(groups):
        for fi, fq in enumerate(group["flavors"]):
            for ri, entry in enumerate(fq["resources"]):
                wanted = changes.get((fq["name"], entry["name"]), {})
                at = f"/spec/resourceGroups/{gi}/flavors/{fi}/resources/{ri}"
                for limit, amount in sorted(wanted.items()):
                    if amount is not None:
                        value = format_quantity(entry["name"], amount)
                        ops.append({"op": "add", "path": f"{at}/{limit}", "value": value})
                    elif entry.get(limit) is not None:
                        ops.append({"op": "remove", "path": f"{at}/{limit}"})
    command = f"kubectl patch clusterqueue {name} --type=json -p '{json.dumps(ops)}'"
    raise ServiceError(
        f"the queues come from the Kubernetes cluster ({source}): its next apply would undo a "
        f"change made here; change the ClusterQueue there: {command}"
    )


def cluster_queue_limits_set(
    *, name: str, limits: Mapping[tuple[str, str], Mapping[str, int | None]], actor: str
) -> dict[str, Any]:
    """Set, per (flavor, resource) of ClusterQueue `name`, its nominalQuota, borrowingLimit and
    lendingLimit (canonical amounts; a limit given as None is removed, one not given stays), in
    one change: the quota form's rows. Each problem is named by its field
    (`<flavor>/<resource>.<limit>`): an entry the queue does not have, a negative amount, a
    lendingLimit above its nominal quota (Kueue's webhook). Audited and published as
    cluster_queue_quota_set; returns what changed ({"<flavor>/<resource>": {limit: {from, to}}})."""
    with transaction.atomic():
        row = ClusterQueue.objects.select_for_update().filter(name=name).first()
        if row is None:
            raise FieldErrors({"clusterQueue": [f"ClusterQueue {name!r} does not exist"]})
        groups, entries = _editable(row.resource_groups)
        errors: dict[str, list[str]] = {}
        for (flavor, resource), wanted in limits.items():
            where = f"{flavor}/{resource}"
            entry = entries.get((flavor, resource))
            if entry is None:
                errors[where] = [f"ClusterQueue {name!r} has no quota of {resource} in {flavor}"]
                continue
            for limit, amount in wanted.items():
                if amount is not None and amount < 0:
                    errors[f"{where}.{limit}"] = ["must not be negative"]
            nominal = wanted.get("nominalQuota", entry["nominalQuota"])
            lending = wanted.get("lendingLimit", entry.get("lendingLimit"))
            if nominal is not None and lending is not None and lending > nominal:
                errors[f"{where}.lendingLimit"] = [
                    f"above the nominal quota {format_quantity(resource, nominal)} (Kueue keeps "
                    "lendingLimit within nominalQuota)"
                ]
        if errors:
            raise FieldErrors(errors)
        refuse_when_mirrored(name, groups, limits)
        changed: dict[str, dict[str, dict[str, str | None]]] = {}
        for (flavor, resource), wanted in sorted(limits.items()):
            entry = entries[(flavor, resource)]
            for limit, amount in sorted(wanted.items()):
                if entry.get(limit) == amount:
                    continue
                before = entry.get(limit)
                changed.setdefault(f"{flavor}/{resource}", {})[limit] = {
                    "from": None if before is None else format_quantity(resource, before),
                    "to": None if amount is None else format_quantity(resource, amount),
                }
                if amount is None:
                    entry.pop(limit, None)
                else:
                    entry[limit] = amount
        detail: dict[str, Any] = {"clusterQueue": name, "limits": changed}
        if changed:
            _quota_changed(row, groups, detail, actor=actor)
    return detail


def cluster_queue_quota_set(
    *, name: str, nominal: Mapping[str, int], flavor: str | None = None, actor: str
) -> dict[str, Any]:
    """Set the nominal quota of some resources of one flavor of ClusterQueue `name` (canonical
    amounts), as an admin changing a tenant's quota; the rest of the queue stays as it is.
    `flavor` may be left out when one flavor of the queue has all those resources.

    The queue must already cover each resource in that flavor (a new resource is a new resource
    group: applyqueues), and a lendingLimit stays within its nominal quota (Kueue's webhook); each
    problem is named by its field (`clusterQueue`, `flavor`, `quota.<resource>`). Refused while
    the queues are mirrored from a cluster: its next apply would undo the change. Admitted
    workloads keep their quota when it shrinks (as in Kueue). The change, its QueuesChanged and
    the audit record (AdminActed by `actor`) commit together; nothing is written when nothing
    changes. Returns what changed, as recorded."""
    with transaction.atomic():
        row = ClusterQueue.objects.select_for_update().filter(name=name).first()
        if row is None:
            raise FieldErrors({"clusterQueue": [f"ClusterQueue {name!r} does not exist"]})
        groups, entries = _editable(row.resource_groups)
        chosen = flavor if flavor is not None else _only_flavor(name, entries, nominal)
        errors = _quota_change_errors(name, entries, chosen, nominal)
        if errors:
            raise FieldErrors(errors)
        changes = {(chosen, r): {"nominalQuota": a} for r, a in nominal.items()}
        refuse_when_mirrored(name, groups, changes)
        changed: dict[str, dict[str, str]] = {}
        for resource, amount in sorted(nominal.items()):
            entry = entries[(chosen, resource)]
            if entry["nominalQuota"] != amount:
                changed[resource] = {
                    "from": format_quantity(resource, entry["nominalQuota"]),
                    "to": format_quantity(resource, amount),
                }
                entry["nominalQuota"] = amount
        detail: dict[str, Any] = {"clusterQueue": name, "flavor": chosen, "nominalQuota": changed}
        if changed:
            _quota_changed(row, groups, detail, actor=actor)
    return detail


def cluster_queue_consolidation_set(
    *, name: str, policy: ConsolidationPolicy, actor: str
) -> dict[str, Any]:
    """Turn consolidation on (Allowed) or off (Never) for ClusterQueue `name`, as its annotation
    gpusched.io/consolidation says in applyqueues' YAML. Refused while the queues are mirrored
    from a cluster (its next apply would undo it), naming the kubectl command that sets the
    annotation there. The change, its QueuesChanged and the audit record commit together;
    nothing is written when nothing changes. Returns what changed."""
    with transaction.atomic():
        row = ClusterQueue.objects.select_for_update().filter(name=name).first()
        if row is None:
            raise FieldErrors({"clusterQueue": [f"ClusterQueue {name!r} does not exist"]})
        source = queue_selectors.queue_source().kind
        if source != QueueSource.Kind.DATABASE:
            raise ServiceError(
                f"the queues come from the Kubernetes cluster ({source}): its next apply would "
                "undo a change made here; change the ClusterQueue there: kubectl annotate "
                f"clusterqueue {name} {CONSOLIDATION_ANNOTATION}={policy.value} --overwrite"
            )
        detail: dict[str, Any] = {"clusterQueue": name, "consolidation": {}}
        if row.consolidation != policy.value:
            detail["consolidation"] = {"from": row.consolidation, "to": policy.value}
            row.consolidation = policy.value
            row.save(update_fields=["consolidation", "updated_at"])
            events.publish(events.QueuesChanged(cluster_queues=[row.name]))
            admin_action_record(
                actor=actor, action="clusterqueue.consolidation", target=name, detail=detail
            )
    return detail


def _quota_changed(
    row: ClusterQueue, groups: list[dict[str, Any]], detail: dict[str, Any], *, actor: str
) -> None:
    """A changed quota: stored, announced and audited, in the caller's transaction."""
    row.resource_groups = groups
    row.save(update_fields=["resource_groups", "updated_at"])
    events.publish(events.QueuesChanged(cluster_queues=[row.name]))
    admin_action_record(actor=actor, action="clusterqueue.quota", target=row.name, detail=detail)


def _editable(
    resource_groups: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], dict[tuple[str, str], dict[str, Any]]]:
    """A copy of a queue's resource groups to rewrite and save, and its entries by (flavor,
    resource), which are the copy's own dicts (changing one changes the copy)."""
    groups = [dict(group) for group in resource_groups]
    entries: dict[tuple[str, str], dict[str, Any]] = {}
    for group in groups:
        group["flavors"] = [dict(fq) for fq in group["flavors"]]
        for fq in group["flavors"]:
            fq["resources"] = [dict(r) for r in fq["resources"]]
            entries.update({(fq["name"], r["name"]): r for r in fq["resources"]})
    return groups, entries


def _only_flavor(
    queue: str, entries: Mapping[tuple[str, str], Any], nominal: Mapping[str, int]
) -> str:
    """The one flavor of the queue that has every resource of `nominal` (else the queue's only
    flavor, whose missing resources are then named), or a field error asking for one."""
    flavors = sorted({f for f, _ in entries})
    fitting = [f for f in flavors if all((f, r) in entries for r in nominal)]
    if len(fitting) == 1 or len(flavors) == 1:
        return (fitting or flavors)[0]
    if not flavors:
        raise FieldErrors({"clusterQueue": [f"ClusterQueue {queue!r} has no quota to change"]})
    raise FieldErrors(
        {"flavor": [f"name one of ClusterQueue {queue!r}'s flavors: {', '.join(flavors)}"]}
    )


def _quota_change_errors(
    queue: str,
    entries: Mapping[tuple[str, str], Mapping[str, Any]],
    flavor: str,
    nominal: Mapping[str, int],
) -> dict[str, list[str]]:
    flavors = sorted({f for f, _ in entries})
    if flavor not in flavors:
        known = ", ".join(flavors) or "none"
        return {
            "flavor": [f"ClusterQueue {queue!r} has no flavor {flavor!r} (its flavors: {known})"]
        }
    covered = sorted(r for f, r in entries if f == flavor)
    errors: dict[str, list[str]] = {}
    for resource, amount in nominal.items():
        entry = entries.get((flavor, resource))
        lending = None if entry is None else entry.get("lendingLimit")
        if entry is None:
            errors[f"quota.{resource}"] = [
                f"flavor {flavor!r} of ClusterQueue {queue!r} has no quota of {resource} (it has "
                f"{', '.join(covered)}); a new resource is a new resource group (applyqueues)"
            ]
        elif amount < 0:
            errors[f"quota.{resource}"] = ["must not be negative"]
        elif lending is not None and lending > amount:
            errors[f"quota.{resource}"] = [
                f"below its lendingLimit {format_quantity(resource, lending)} (Kueue keeps "
                "lendingLimit within nominalQuota)"
            ]
    return errors


def check_config(
    config: QueueConfig,
    *,
    known_flavors: frozenset[str] = frozenset(),
    known_parents: Mapping[str, str] | None = None,
    known_queues: frozenset[str] = frozenset(),
    known_topologies: frozenset[str] = frozenset(),
) -> None:
    """What one configuration must hold, with what is stored besides it: flavors and cohort
    parents exist and make trees, LocalQueues name ClusterQueues that exist, one global default
    priority class at most."""
    try:
        config.check_references(known_flavors, known_parents, known_topologies)
    except ValueError as exc:
        raise ServiceError(str(exc)) from exc
    queues = known_queues | {cq.name for cq in config.cluster_queues}
    for lq in config.local_queues:
        if lq.cluster_queue not in queues:
            raise ServiceError(
                f"LocalQueue {lq.namespace}/{lq.name}: ClusterQueue {lq.cluster_queue!r} "
                "does not exist"
            )
    if sum(1 for pc in config.priority_classes if pc.global_default) > 1:
        raise ServiceError("only one priority class may be the global default")


def config_write(config: QueueConfig) -> dict[str, list[str]]:
    """Create or update every object of a checked configuration (inside the caller's
    transaction); the names written, by kind."""
    for topology in config.topologies:
        Topology.objects.update_or_create(
            name=topology.name, defaults={"levels": list(topology.levels)}
        )
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
                "topology_name": flavor.topology_name,
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
        ClusterQueue.objects.update_or_create(
            name=cq.name,
            # Written by its source again: no longer terminating if it was.
            defaults={**cluster_queue_fields(cq), "deleted_from_source_at": None},
        )
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
    return {
        "flavors": [f.name for f in config.flavors],
        "cohorts": [c.name for c in config.cohorts],
        "cluster_queues": [cq.name for cq in config.cluster_queues],
        "local_queues": [f"{lq.namespace}/{lq.name}" for lq in config.local_queues],
        "priority_classes": [pc.name for pc in config.priority_classes],
        "topologies": [t.name for t in config.topologies],
    }


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
        "default_runtime_s": cq.default_runtime_s,
        "consolidation": cq.consolidation.value,
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
    topology: dict[str, Any] = field(default_factory=dict)  # its flavor's {"name", "levels"}


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
                "topology": admission.topology,
            }
            if Workload.objects.filter(pk=w.pk, state=Workload.State.PENDING).update(**values):
                for key, value in values.items():
                    setattr(w, key, value)
                admitted.append(w)
        fair_sharing.local_queue_entry_penalties(admitted=admitted)
        events.publish(*(workload_event(w) for w in admitted))
    return len(admitted)
