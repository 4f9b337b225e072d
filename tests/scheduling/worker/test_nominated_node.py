"""The database side's half of tests/kube/test_nominated_node.py (DESIGN.md §8): a node emptied for
a preemptor goes to it, and is not refilled by lower-priority pods across cycles, neither new ones
nor the evicted ones back in the queue. Here evicted pods are gone at once, so the preemptor is
placed in the cycle that evicts for it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.core.scheduler import Framework
from scheduling.core.types import ServiceClass
from scheduling.models import Allocation, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
SWEEPS = 7  # one GPU each: the 8-GPU pod must evict them all


def sweep(name: str) -> Workload:
    return factories.workload(
        factories.tenant("research"), name, gpus=1, service_class=ServiceClass.OPPORTUNISTIC
    )


def node_of(workload: Workload) -> str:
    allocation = Allocation.objects.filter(pod__workload=workload, active=True).first()
    return allocation.node.name if allocation is not None else ""


def test_a_node_emptied_for_a_preemptor_is_not_refilled_by_lower_priority_pods() -> None:
    (node,) = factories.nodes(1)
    now = timezone.now()
    cycle = database_cycle(Framework(load_profile("topology")), identity="w1")
    cycle.clock = lambda: now
    sweeps = [sweep(f"sweep-{k}") for k in range(SWEEPS)]
    cycle.run_once()
    assert [node_of(w) for w in sweeps] == [node.name] * SWEEPS

    now += timedelta(seconds=60)
    whole = factories.workload(factories.tenant("research"), "whole-server", gpus=8, priority=100)
    cycle.run_once()
    assert node_of(whole) == node.name
    late = sweep("late")
    for _ in range(3):
        now += timedelta(seconds=60)
        cycle.run_once()
    assert node_of(whole) == node.name
    assert Allocation.objects.filter(pod__workload=whole).count() == 1  # placed once
    for workload in [*sweeps, late]:
        workload.refresh_from_db()
        assert node_of(workload) == ""
    assert sorted(w.evictions for w in sweeps) == [1] * SWEEPS
    assert late.evictions == 0
