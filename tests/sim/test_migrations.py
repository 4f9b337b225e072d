"""A development database upgrades without losing its simulations: sim's migration copies each
pod's former `simulation` column into sim.PodSimulation before scheduling's 0014 removes the
column, and undoing both puts them back."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from scheduling.models import Pod
from sim.models import PodSimulation
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

LAST_WITH_COLUMN = ("scheduling", "0013_event_ids_in_commit_order")
BEFORE = [LAST_WITH_COLUMN, ("sim", None)]
STARTED = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
DOC = {
    "arrival_s": 12.5,
    "duration_s": 3600,
    "utilization": {"kind": "bursty", "mean": 0.4},
    "lost_s": 30.0,
}


def migrate(targets: list[tuple[str, str | None]]) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return MigrationExecutor(connection)


def old_pods() -> Any:
    """Pod as it was before (with its `simulation` column), the database migrated back to then."""
    state = migrate(BEFORE).loader.project_state(LAST_WITH_COLUMN)
    return state.apps.get_model("scheduling", "Pod")


def latest() -> list[tuple[str, str | None]]:
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def test_the_simulation_of_each_pod_moves_to_sims_table_and_back() -> None:
    workload = factories.workload(factories.tenant(), "train", pods=2)
    first, second = Pod.objects.filter(workload=workload).order_by("id")
    Pod.objects.filter(pk=first.pk).update(started_at=STARTED)
    ends = latest()
    try:
        old = old_pods()
        old.objects.filter(pk=first.pk).update(simulation=DOC)

        migrate(ends)
        run = PodSimulation.objects.get()
        assert run.pod_id == first.pk
        assert (run.arrival_s, run.duration_s, run.utilization) == (
            12.5,
            3600.0,
            DOC["utilization"],
        )
        assert run.lost_in(STARTED) == 30.0 and run.lost_since == STARTED
        assert not PodSimulation.objects.filter(pod_id=second.pk).exists()  # it had none

        old = old_pods()
        assert old.objects.get(pk=first.pk).simulation == {**DOC, "duration_s": 3600.0}
        assert old.objects.get(pk=second.pk).simulation == {}
    finally:
        migrate(ends)
