"""Nodes as the cluster reports them, and cordoning."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from django.db import transaction

from scheduling import events
from scheduling.bulk import insert_rows
from scheduling.core.types import GpuDevice, NodeSpec
from scheduling.models import (
    Gpu,
    Node,
    NodeNuma,
)
from scheduling.worker.cluster_state import topology_to_json

logger = logging.getLogger(__name__)


def node_register(*, spec: NodeSpec, source: str) -> Node:
    """Create or update a node and its GPUs from what the cluster reports."""
    with transaction.atomic():
        node, created = Node.objects.update_or_create(
            name=spec.name, defaults=_node_values(spec, source)
        )
        existing = {gpu.index: gpu for gpu in node.gpus.all()}
        for device in spec.gpus:
            if device.index in existing:
                Gpu.objects.filter(pk=existing[device.index].pk).update(**_gpu_values(device))
            else:
                Gpu.objects.create(node=node, index=device.index, **_gpu_values(device))
        # A GPU the node no longer reports is kept, marked absent: the pods that held it are
        # still recorded against it (the node is quarantined until they are gone).
        reported = {device.index for device in spec.gpus}
        gone = [index for index in existing if index not in reported]
        Gpu.objects.filter(node=node, index__in=gone).update(present=False)
        if gone:
            logger.warning("node %s no longer reports GPU(s) %s", node.name, sorted(gone))
        _register_numa(node, spec.numa_cpu_shares())
        events.publish(_node_changed(node, spec))
    if created:
        logger.debug("node %s registered with %d GPUs", node.name, len(spec.gpus))
    return node


def nodes_register(*, specs: Sequence[NodeSpec], source: str) -> int:
    """`node_register` for many nodes in one transaction (an informer's first list of a whole
    cluster): the nodes not known yet, their GPUs, NUMA nodes and events, go in by a few bulk
    inserts (with one event each); a known one is updated as `node_register` does. Returns how
    many were new."""
    with transaction.atomic():
        known = set(
            Node.objects.filter(name__in=[spec.name for spec in specs]).values_list(
                "name", flat=True
            )
        )
        fresh = [spec for spec in specs if spec.name not in known]
        nodes = insert_rows([Node(name=spec.name, **_node_values(spec, source)) for spec in fresh])
        insert_rows(
            [
                Gpu(node=node, index=device.index, **_gpu_values(device))
                for node, spec in zip(nodes, fresh, strict=True)
                for device in spec.gpus
            ]
        )
        insert_rows(
            [
                NodeNuma(node=node, index=index, cpu_milli=share)
                for node, spec in zip(nodes, fresh, strict=True)
                for index, share in enumerate(spec.numa_cpu_shares())
            ]
        )
        events.publish(*(_node_changed(n, spec) for n, spec in zip(nodes, fresh, strict=True)))
        for spec in specs:
            if spec.name in known:
                node_register(spec=spec, source=source)
    return len(fresh)


def _node_values(spec: NodeSpec, source: str) -> dict[str, Any]:
    return {
        "source": source,
        "labels": dict(spec.labels),
        "taints": [{"key": t.key, "value": t.value, "effect": t.effect.value} for t in spec.taints],
        "cpu_milli": spec.cpu_milli,
        "memory_mib": spec.memory_mib,
        "cordoned": spec.cordoned,
        "topology": topology_to_json(spec.topology) if spec.topology else {},
    }


def _gpu_values(device: GpuDevice) -> dict[str, Any]:
    return {
        "uuid": device.uuid,
        "model": device.model,
        "memory_mib": device.memory_mib,
        "sharing": device.sharing.value,
        "mig_layout": list(device.mig_layout),
        "present": True,
    }


def _node_changed(node: Node, spec: NodeSpec) -> events.NodeChanged:
    return events.NodeChanged(
        node=node.name, cordoned=node.cordoned, gpus=len(spec.gpus), labels=node.labels
    )


def _register_numa(node: Node, shares: Sequence[int]) -> None:
    """Each NUMA node's share of the CPU; what placements charged to it is kept (a smaller share
    than that quarantines the node, it never fails the registration)."""
    rows = {row.index: row for row in node.numa.all()}
    for index, share in enumerate(shares):
        if index in rows:
            if rows[index].cpu_milli != share:
                NodeNuma.objects.filter(pk=rows[index].pk).update(cpu_milli=share)
        else:
            NodeNuma.objects.create(node=node, index=index, cpu_milli=share)
    beyond = NodeNuma.objects.filter(node=node, index__gte=len(shares))
    beyond.update(cpu_milli=0)  # still charged: nothing more fits there
    beyond.filter(cpu_used_milli=0).delete()


def node_set_cordoned(*, node: Node, cordoned: bool) -> Node:
    with transaction.atomic():
        Node.objects.filter(pk=node.pk).update(cordoned=cordoned)
        node.cordoned = cordoned
        events.publish(
            events.NodeChanged(
                node=node.name,
                cordoned=cordoned,
                gpus=node.gpus.filter(present=True).count(),
                labels=node.labels,
                cordon_only=True,
            )
        )
    return node


def nodes_quarantine(*, reasons: Mapping[str, str]) -> int:
    """Record which nodes the scheduler does not trust now, and why (the rest it trusts again);
    an event for each change. Returns how many changed."""
    current = dict(
        Node.objects.exclude(quarantine_reason="").values_list("name", "quarantine_reason")
    )
    changed = {
        name: reasons.get(name, "")
        for name in set(current) | set(reasons)
        if current.get(name, "") != reasons.get(name, "")
    }
    if not changed:
        return 0
    with transaction.atomic():
        for name, reason in changed.items():
            Node.objects.filter(name=name).update(quarantine_reason=reason[:512])
            if reason:
                logger.warning("node %s quarantined: %s", name, reason)
            else:
                logger.info("node %s is consistent again", name)
        events.publish(
            *(events.NodeQuarantined(node=name, reason=r) for name, r in sorted(changed.items()))
        )
    return len(changed)
