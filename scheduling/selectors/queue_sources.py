"""Whose queues the database holds: what `runkube` checks before the cluster's Kueue objects
replace them (scheduling.services.queues_replace), and which the cluster has deleted."""

from __future__ import annotations

from datetime import datetime

from scheduling.models import ClusterQueue, QueueSource


def cluster_queues_of_another_source() -> int:
    """How many ClusterQueues the database holds that did not come from a cluster's Kueue
    objects: those of `applyqueues`, the REST API or a demo (the source is not CLUSTER, or no
    cluster ever recorded one)."""
    source = QueueSource.objects.values_list("kind", flat=True).first()
    if source == QueueSource.Kind.CLUSTER:
        return 0
    return ClusterQueue.objects.count()


def cluster_queues_deleted_from_source() -> dict[str, datetime]:
    """ClusterQueues the cluster deleted that are kept, terminating, for their admitted workloads
    (services.queues_replace): name -> when the cluster was first found without them."""
    rows = ClusterQueue.objects.exclude(deleted_from_source_at=None).values_list(
        "name", "deleted_from_source_at"
    )
    return {name: deleted_at for name, deleted_at in rows if deleted_at is not None}
