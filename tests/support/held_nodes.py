"""What both sides' nominated-node tests assert once the node emptied for a preemptor is its."""

from __future__ import annotations

from collections.abc import Sequence

from scheduling.models import Allocation, Workload


def node_of(workload: Workload) -> str:
    allocation = Allocation.objects.filter(pod__workload=workload, active=True).first()
    return allocation.node.name if allocation is not None else ""


def assert_held_for(
    whole: Workload, node: str, victims: Sequence[Workload], late: Workload
) -> None:
    """`whole` was placed on `node` once; the victims, evicted once each, and the pod that came
    later are not there: nothing of lower priority refilled the node while it emptied."""
    assert node_of(whole) == node
    assert Allocation.objects.filter(pod__workload=whole).count() == 1  # placed once
    for workload in [*victims, late]:
        workload.refresh_from_db()
        assert node_of(workload) == ""
    assert sorted(w.evictions for w in victims) == [1] * len(victims)
    assert late.evictions == 0
