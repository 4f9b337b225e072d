"""Queues mirrored from a source that holds all of them (Kueue's objects in a Kubernetes cluster):
a replace-style apply, where what the source no longer has goes away, and the source's state
(models.QueueSource) that the API and the dashboard show.

What goes away follows Kueue's own deletion rules (kubernetes-sigs/kueue
pkg/controller/core/clusterqueue_controller.go and localqueue_controller.go):
- a LocalQueue is gone at once; its admitted workloads keep their quota in their ClusterQueue
  (a workload holds its admission, not its LocalQueue) and its pending ones wait, Inadmissible;
- a ClusterQueue with admitted workloads is kept as Kueue's `kueue.x-k8s.io/resource-in-use`
  finalizer keeps it, terminating: it admits nothing more (stopPolicy Hold) and goes once its
  last admitted workload has; the ResourceFlavors it names stay with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from scheduling import events
from scheduling.core.queueing.config import QueueConfig, StopPolicy
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
from scheduling.services.queues import check_config, config_write


@dataclass(frozen=True)
class QueuesReplaced:
    applied: dict[str, list[str]]
    removed: list[str] = field(default_factory=list)  # "ClusterQueue a", "LocalQueue ns/b", ...
    terminating: list[str] = field(default_factory=list)  # ClusterQueues kept for their workloads


def queues_replace(
    *, config: QueueConfig, fair_sharing: bool, now: datetime | None = None
) -> QueuesReplaced:
    """Make the stored queues exactly `config`: create or update what it has, remove what it has
    not. `fair_sharing`: the source also holds the admission fair sharing settings (without them
    the core's defaults apply); else the stored settings are left alone. A ClusterQueue kept for
    its admitted workloads is marked deleted from the source as of `now` (default: the clock)."""
    now = now or timezone.now()
    with transaction.atomic():
        terminating = {
            row.name: row
            for row in ClusterQueue.objects.exclude(
                name__in=[cq.name for cq in config.cluster_queues]
            ).filter(workloads__state__in=(Workload.State.ADMITTED, Workload.State.RUNNING))
        }
        kept_flavors = {
            fq["name"]
            for row in terminating.values()
            for group in row.resource_groups
            for fq in group["flavors"]
        }
        check_config(config)
        applied = config_write(config)
        removed = _remove_missing(config, frozenset(terminating), frozenset(kept_flavors))
        if fair_sharing and config.admission_fair_sharing is None:
            AdmissionFairSharingSettings.objects.all().delete()
        for row in terminating.values():
            if row.stop_policy != StopPolicy.HOLD.value or row.deleted_from_source_at is None:
                row.stop_policy = StopPolicy.HOLD.value
                row.deleted_from_source_at = row.deleted_from_source_at or now
                row.save(update_fields=["stop_policy", "deleted_from_source_at", "updated_at"])
        events.publish(events.QueuesChanged(**applied, removed=removed))
    return QueuesReplaced(applied, removed, sorted(terminating))


def _remove_missing(
    config: QueueConfig, terminating: frozenset[str], kept_flavors: frozenset[str]
) -> list[str]:
    """Delete what `config` does not have (LocalQueues first: they protect their ClusterQueue)."""
    removed: list[str] = []
    keep_lqs = {(lq.namespace, lq.name) for lq in config.local_queues}
    for lq in LocalQueue.objects.order_by("namespace", "name"):
        if (lq.namespace, lq.name) not in keep_lqs:
            removed.append(f"LocalQueue {lq.namespace}/{lq.name}")
            lq.delete()
    keep = {cq.name for cq in config.cluster_queues} | terminating
    removed += _delete_except(ClusterQueue, "ClusterQueue", keep)
    removed += _delete_except(Cohort, "Cohort", {c.name for c in config.cohorts})
    removed += _delete_except(
        ResourceFlavor, "ResourceFlavor", {f.name for f in config.flavors} | kept_flavors
    )
    kept_topologies = set(
        ResourceFlavor.objects.exclude(topology_name="").values_list("topology_name", flat=True)
    )
    removed += _delete_except(
        Topology, "Topology", {t.name for t in config.topologies} | kept_topologies
    )
    keep_classes = {(pc.kind.value, pc.name) for pc in config.priority_classes}
    for pc in PriorityClass.objects.order_by("kind", "name"):
        if (pc.kind, pc.name) not in keep_classes:
            removed.append(f"{pc.kind} {pc.name}")
            pc.delete()
    return removed


def _delete_except(
    model: type[ClusterQueue] | type[Cohort] | type[ResourceFlavor] | type[Topology],
    kind: str,
    keep: set[str],
) -> list[str]:
    gone = model.objects.exclude(name__in=keep)
    names = sorted(gone.values_list("name", flat=True))
    gone.delete()
    return [f"{kind} {name}" for name in names]


def queue_source_record(
    *,
    kind: QueueSource.Kind,
    now: datetime,
    error: str = "",
    applied: bool = False,
    notes: Sequence[str] = (),
) -> bool:
    """Say where the queues come from now. `error`: the source's objects are refused (the last
    good queues stay; `notes` and `applied_at` keep describing them); `applied`: they were just
    applied, with `notes` on what was left out or kept back. True when anything changed."""
    with transaction.atomic():
        row = QueueSource.objects.select_for_update().first() or QueueSource()
        before = (row.pk, row.kind, row.error, list(row.notes))
        row.kind = kind
        if error:
            row.error_since = row.error_since if row.error else now
            row.error = error
        else:
            row.error, row.error_since = "", None
            if applied:
                row.applied_at, row.notes = now, list(notes)
            elif kind != QueueSource.Kind.CLUSTER:
                row.notes = []
        changed = before != (row.pk, row.kind, row.error, list(row.notes))
        if changed or applied:
            row.save()
        if changed:
            events.publish(events.QueueSourceChanged(kind=row.kind, error=row.error))
    return changed
