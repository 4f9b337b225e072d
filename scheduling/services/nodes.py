"""Nodes as the cluster reports them, and cordoning."""

from __future__ import annotations

import logging

from django.db import transaction

from scheduling import events
from scheduling.cluster_state import topology_to_json
from scheduling.core.types import (
    NodeSpec,
)
from scheduling.models import (
    Gpu,
    Node,
)

logger = logging.getLogger(__name__)


def node_register(*, spec: NodeSpec, source: str = Node.Source.SIMULATOR) -> Node:
    """Create or update a node and its GPUs from what the cluster reports."""
    with transaction.atomic():
        node, created = Node.objects.update_or_create(
            name=spec.name,
            defaults={
                "source": source,
                "labels": dict(spec.labels),
                "taints": [
                    {"key": t.key, "value": t.value, "effect": t.effect.value} for t in spec.taints
                ],
                "cpu_milli": spec.cpu_milli,
                "memory_mib": spec.memory_mib,
                "cordoned": spec.cordoned,
                "topology": topology_to_json(spec.topology) if spec.topology else {},
            },
        )
        existing = {gpu.index: gpu for gpu in node.gpus.all()}
        for device in spec.gpus:
            values = {
                "uuid": device.uuid,
                "model": device.model,
                "memory_mib": device.memory_mib,
                "sharing": device.sharing.value,
                "mig_layout": list(device.mig_layout),
            }
            if device.index in existing:
                Gpu.objects.filter(pk=existing[device.index].pk).update(**values)
            else:
                Gpu.objects.create(node=node, index=device.index, **values)
        events.publish(
            events.NodeChanged(
                node=node.name, cordoned=node.cordoned, gpus=len(spec.gpus), labels=node.labels
            )
        )
    if created:
        logger.debug("node %s registered with %d GPUs", node.name, len(spec.gpus))
    return node


def node_set_cordoned(*, node: Node, cordoned: bool) -> Node:
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(cordoned=cordoned)
        node.cordoned = cordoned
        events.publish(
            events.NodeChanged(
                node=node.name, cordoned=cordoned, gpus=node.gpus.count(), labels=node.labels
            )
        )
    return node
