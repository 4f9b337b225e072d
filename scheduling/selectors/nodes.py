"""The nodes gpusched manages, by name: what telemetry may be placed on (gpusched/settings.py
TELEMETRY_CLUSTER_NODES, read by telemetry.selectors.cluster_nodes)."""

from __future__ import annotations

from scheduling.models import Node


def node_names() -> frozenset[str]:
    return frozenset(Node.objects.values_list("name", flat=True))
