"""Why a pod waits, as structured data written with each failed attempt and read back without
parsing any text: grouped by the first filter each node failed, with what would make it fit."""

from __future__ import annotations

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.models import Node, Pod
from scheduling.profile_files import load_profile
from scheduling.selectors import why_pending
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db]


def cycle() -> None:
    database_cycle(Framework(load_profile("topology")), identity="why").run_once()


def test_too_big_for_any_node_even_empty() -> None:
    factories.nodes(3, "dgx-h100")
    services.node_set_cordoned(node=Node.objects.order_by("name")[0], cordoned=True)
    factories.workload(factories.tenant(), "huge", gpus=16)
    cycle()
    pod = Pod.objects.get()
    why = why_pending.of_pod(pod)
    assert why is not None
    assert (why.nodes, why.feasible, why.resolvable_nodes) == (3, 0, 0)
    assert sum(g.nodes for g in why.groups) == 3  # each node counted once
    assert all(g.unresolvable for g in why.groups)
    cordoned = [g for g in why.groups if "cordon" in g.reason or "unschedulable" in g.reason]
    assert cordoned and cordoned[0].nodes == 1
    assert why.would_fit.startswith("no node fits even empty")
    # The groups are what the kube-style line counts, without reading the line.
    for group in why.groups:
        assert f"{group.nodes} {group.reason}" in pod.last_reason


def test_fits_once_running_pods_finish() -> None:
    factories.nodes(2, "dgx-h100")
    owner = factories.tenant()
    factories.workload(owner, "fill", pods=2, gpus=8)
    cycle()
    factories.workload(owner, "next", gpus=4)
    cycle()
    pod = Pod.objects.get(workload__name="next")
    why = why_pending.of_pod(pod)
    assert why is not None and why.feasible == 0
    assert why.resolvable_nodes == 2
    assert "once pods running there finish" in why.would_fit or "preemption" in why.would_fit
    assert {name for g in why.groups for name in g.examples} <= set(
        Node.objects.values_list("name", flat=True)
    )

    # Bound at last: the old explanation is no longer why it waits (nothing is).
    services.pods_finish(pods=list(Pod.objects.filter(workload__name="fill")), now=timezone.now())
    Pod.objects.filter(pk=pod.pk).update(next_attempt_at=None)  # past its backoff
    cycle()
    pod.refresh_from_db()
    assert pod.phase == Pod.Phase.BOUND and why_pending.of_pod(pod) is None


def test_a_reason_is_listed_once_with_all_its_nodes() -> None:
    """Stored groups split by whether load could free the nodes read back as one group per
    reason: 'Insufficient nvidia.com/gpu' on 16 nodes, 3 of which a finishing pod could free."""
    doc = {
        "summary": "0/17 nodes are available",
        "nodes": 17,
        "feasible": 0,
        "groups": [
            {
                "plugin": "Fit",
                "reason": "Insufficient nvidia.com/gpu",
                "unresolvable": True,
                "nodes": 13,
                "examples": ["a", "b"],
            },
            {
                "plugin": "Taint",
                "reason": "untolerated taint",
                "unresolvable": True,
                "nodes": 1,
                "examples": ["t"],
            },
            {
                "plugin": "Fit",
                "reason": "Insufficient nvidia.com/gpu",
                "unresolvable": False,
                "nodes": 3,
                "examples": ["b", "c"],
            },
        ],
        "resolvable_nodes": 3,
    }
    why = why_pending.read(doc)
    assert why is not None
    first, second = why.groups
    assert (first.reason, first.nodes, first.resolvable) == ("Insufficient nvidia.com/gpu", 16, 3)
    assert not first.unresolvable and first.examples == ("a", "b", "c")
    assert (second.reason, second.nodes, second.unresolvable) == ("untolerated taint", 1, True)
