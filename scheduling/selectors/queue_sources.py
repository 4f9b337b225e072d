"""Whose queues the database holds: what `runkube` checks before the cluster's Kueue objects
replace them (scheduling.services.queues_replace)."""

from __future__ import annotations

from scheduling.models import ClusterQueue, QueueSource


def cluster_queues_of_another_source() -> int:
    """How many ClusterQueues the database holds that did not come from a cluster's Kueue
    objects: those of `applyqueues`, the REST API or a demo (the source is not CLUSTER, or no
    cluster ever recorded one)."""
    source = QueueSource.objects.values_list("kind", flat=True).first()
    if source == QueueSource.Kind.CLUSTER:
        return 0
    return ClusterQueue.objects.count()
