"""Admin actions on nodes the cluster manages (Node.Source.KUBERNETES): asked here, carried out
by the scheduler's cycle against the cluster (scheduling.worker.node_actions), answered with what
the cluster said. A cordon the cluster did not take is not recorded as one: the node's cordon
here follows what the cluster read back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction

from scheduling.models import Node, NodeAction
from scheduling.services.audit import admin_action_record
from scheduling.services.nodes import node_set_cordoned


def node_action_request(*, node: Node, kind: str, actor: str, now: datetime) -> NodeAction:
    """Ask the cycle to cordon, uncordon or drain `node` in its cluster; audited with the ask."""
    with transaction.atomic():
        action = NodeAction.objects.create(node=node.name, kind=kind, actor=actor, requested_at=now)
        admin_action_record(
            actor=actor,
            action=f"node.{kind}",
            target=node.name,
            detail={"requested": action.pk, "cluster": "kubernetes"},
        )
    return action


def node_action_answered(
    *, action: NodeAction, answer: dict[str, Any], unschedulable: bool | None, now: datetime
) -> NodeAction:
    """Record the cluster's answer, and the node's cordon as the cluster read it back."""
    with transaction.atomic():
        node = Node.objects.filter(name=action.node).first()
        if node is not None and unschedulable is not None and node.cordoned != unschedulable:
            node_set_cordoned(node=node, cordoned=unschedulable)
        action.answer, action.answered_at = answer, now
        action.save(update_fields=["answer", "answered_at"])
    return action
