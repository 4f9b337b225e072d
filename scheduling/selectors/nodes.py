"""The nodes gpusched manages, by name: what telemetry may be placed on (gpusched/settings.py
TELEMETRY_CLUSTER_NODES, read by telemetry.selectors.cluster_nodes)."""

from __future__ import annotations

from django.db.models import Count

from scheduling.models import Node


def node_names() -> frozenset[str]:
    return frozenset(Node.objects.values_list("name", flat=True))


def node_count_by_source() -> dict[str, int]:
    """How many nodes each source registered (the simulator, a Kubernetes cluster)."""
    counts = Node.objects.values("source").annotate(count=Count("id")).order_by("source")
    return {row["source"]: row["count"] for row in counts}
