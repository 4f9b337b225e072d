"""Admins' cordons, uncordons and drains of the cluster's nodes, carried out by the cycle right
after its sync (the process that holds the cluster's connection), each answered with what the
cluster said (scheduling.services.node_actions).

A drain is kubectl's: cordon, then the Eviction API for the pods on the node, whole workloads at
a time as every eviction of the cycle (scheduling.worker.cycle_evictions): a workload with a pod
the cluster refused (429: a PodDisruptionBudget) keeps all of it, the others go back to their
queues and their pods, terminating in the cluster, are released once gone. A pod the cluster
refused is reported, never taken for drained."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from scheduling import services
from scheduling.models import Allocation, Node, NodeAction, Pod, Workload
from scheduling.worker.cycle_evictions import Evictions
from scheduling.worker.cycle_report import CycleReport

# At most this many asks a cycle: a burst of clicks must not hold up scheduling.
ACTIONS_PER_CYCLE = 20


def workloads_on_node(node: Node) -> list[Workload]:
    """Active workloads holding (or reserving) anything on the node."""
    ids = (
        Allocation.objects.filter(node=node, active=True)
        .values_list("pod__workload_id", flat=True)
        .distinct()
    )
    return list(
        Workload.objects.filter(pk__in=list(ids), state__in=Workload.ACTIVE_STATES)
        .select_related("tenant")
        .order_by("id")
    )


def carry_out(evictions: Evictions, now: datetime, report: CycleReport) -> int:
    """The asks not yet answered, oldest first; returns how many were answered."""
    asks = list(NodeAction.objects.filter(answered_at__isnull=True).order_by("id"))
    for action in asks[:ACTIONS_PER_CYCLE]:
        said = evictions.side.cordon(action.node, action.kind != NodeAction.Kind.UNCORDON)
        answer: dict[str, Any] = {
            "node": {
                "status": said.status,
                "unschedulable": said.unschedulable,
                "message": said.message,
            }
        }
        node = Node.objects.filter(name=action.node).first()
        if action.kind == NodeAction.Kind.DRAIN and said.status == 200 and node is not None:
            answer["pods"] = _drain(node, evictions, now, report)
        services.node_action_answered(
            action=action, answer=answer, unschedulable=said.unschedulable, now=now
        )
    return min(len(asks), ACTIONS_PER_CYCLE)


def _drain(
    node: Node, evictions: Evictions, now: datetime, report: CycleReport
) -> list[dict[str, Any]]:
    workloads = workloads_on_node(node)
    placed = {
        str(p.uid): p
        for p in Pod.objects.filter(workload__in=workloads, phase__in=Pod.PLACED_PHASES)
        .select_related("workload__tenant")
        .order_by("id")
    }
    said: dict[str, str] = {}
    evicted = evictions.workloads(
        workloads, f"node {node.name} drained", None, now, report, said=said
    )
    return [
        {
            "pod": f"{p.workload.tenant.namespace}/{p.name}",
            "workload": f"{p.workload.tenant.namespace}/{p.workload.name}",
            "status": said.get(uid, ""),
            "evicted": p.workload_id in evicted,
        }
        for uid, p in placed.items()
    ]
