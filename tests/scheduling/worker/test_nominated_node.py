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
from scheduling.models import Workload
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories
from tests.support.held_nodes import assert_held_for, node_of

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
SWEEPS = 7  # one GPU each: the 8-GPU pod must evict them all


def sweep(name: str) -> Workload:
    return factories.workload(
        factories.tenant("research"), name, gpus=1, service_class=ServiceClass.OPPORTUNISTIC
    )


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
    assert_held_for(whole, node.name, sweeps, late)
