"""A cycle stays under its deadline and yields (issue 33, item 1): past it, what is left waits for
the next cycle, counted; every cycle still commits something, so the scheduler moves on however
short the deadline; and a long cycle that makes progress keeps its liveness."""

from __future__ import annotations

from typing import Any

import pytest
from django.db.models import Sum

from common.process_metrics import LoopHealth, register_health
from scheduling.core.scheduler import Framework
from scheduling.models import Node, Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.worker import metrics
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


class Ticks:
    """A clock that moves `step` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.step = step
        self.now = 0.0

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def deferred() -> float:
    return metrics.registry.get_sample_value("gpusched_scheduling_deferred_pods_total") or 0.0


def cycle(**options: Any) -> SchedulingCycle:
    return database_cycle(Framework(load_profile("topology")), identity="deadline", **options)


def test_past_its_deadline_a_cycle_leaves_the_rest_for_the_next_and_each_commits_some() -> None:
    factories.nodes(2)
    owner = factories.tenant()
    factories.workload(owner, "singles", pods=7, gpus=1)
    factories.workload(owner, "gang", pods=2, gpus=2, min_count=2)
    scheduler = cycle(commit_size=2, deadline_s=0.0)  # every check finds the deadline passed
    deferred_before = deferred()

    # Admission did work: the batch waits for the next cycle.
    first = scheduler.run_once()
    metrics.record_cycle(first)
    assert first.admitted == 2 and first.attempted == 0 and first.over_deadline and first.more

    # Each cycle commits its first chunk and leaves the rest, pending, for the next.
    reports = []
    while True:
        report = scheduler.run_once()
        metrics.record_cycle(report)
        reports.append(report)
        if not report.more:
            break
    # A cycle that left placements over is followed by a batch of what it got through in time
    # (2), doubled back after a cycle within the deadline (4): fewer placements are scheduled
    # only to be deferred (12, where every batch taking all that waits deferred 17).
    assert [(r.attempted, r.bound, r.deferred) for r in reports] == [
        (9, 2, 7),
        (2, 2, 0),
        (5, 2, 3),
        (3, 1, 2),  # the batch of 2 takes the gang's second member too
        (2, 2, 0),
        (0, 0, 0),  # a batch held to 1 said more might wait
    ]
    assert [r.over_deadline for r in reports] == [True, False, True, True, False, False]
    assert deferred() - deferred_before == 12
    assert not Pod.objects.exclude(phase=Pod.Phase.BOUND).exists()
    assert set(Workload.objects.values_list("state", flat=True)) == {Workload.State.ADMITTED}
    gpus = Node.objects.aggregate(total=Sum("gpus__used_milli"))["total"]
    assert gpus == (7 + 2 * 2) * 1000  # nothing deferred was charged, nothing twice


def test_a_cycle_within_its_deadline_commits_everything_in_one() -> None:
    factories.nodes(2)
    owner = factories.tenant()
    factories.workload(owner, "singles", pods=7, gpus=1)
    report = cycle(commit_size=2, deadline_s=60.0).run_once()
    assert (report.admitted, report.bound, report.deferred) == (1, 7, 0)
    assert not report.over_deadline and not report.more


def test_a_long_cycle_committing_chunk_after_chunk_stays_alive() -> None:
    """Each chunk committed tells the loop's liveness: a cycle far longer than the liveness
    budget, making progress, is never taken for stuck (deploy/ would restart it mid-cycle)."""
    factories.nodes(2)
    owner = factories.tenant()
    factories.workload(owner, "singles", pods=8, gpus=1)
    clock = Ticks(step=4.0)  # each read of the clock: 4 s later
    health = LoopHealth(stuck_after_s=10.0, clock=clock)
    scheduler = cycle(commit_size=1, deadline_s=1e9, timer=clock)
    register_health(health)
    try:
        health.step_started()
        started = clock.now
        report = scheduler.run_once()
        took = clock.now - started
        alive, _ = health.liveness()
    finally:
        register_health(None)
    assert report.bound == 8 and took > 3 * health.stuck_after_s
    assert alive


def test_the_deadline_is_a_setting(settings) -> None:
    settings.SCHEDULER_CYCLE_DEADLINE_S = 2.5
    assert cycle().deadline_s == 2.5
