"""Every writer that changes a workload's pods takes its row locks in one order
(docs/architecture.md, "Lock order"): workloads, pods, allocations and GPU assignments, then the
node, NUMA and GPU counters. Two writers in opposite orders each hold what the other waits for
(issue 33's DeadlockDetected): a release that moved the GPU counters before the nodes' against a
bind, an end of pods that locked them before their workload against an eviction."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling import services
from scheduling.models import Pod, Workload
from tests.scheduling import factories
from tests.scheduling.test_services import schedule_pending

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

ORDER = {
    "scheduling_workload": 0,
    "scheduling_pod": 1,
    "scheduling_allocation": 2,
    "scheduling_gpuassignment": 2,
    "scheduling_node": 3,
    "scheduling_nodenuma": 4,
    "scheduling_gpu": 5,
}
_UPDATE = re.compile(r'^UPDATE "(\w+)"')
_LOCK = re.compile(r'^SELECT .*? FROM "(\w+)".* FOR (?:NO KEY )?UPDATE', re.DOTALL)


@pytest.fixture(autouse=True)
def _row_locks() -> None:
    if not connection.features.has_select_for_update:
        pytest.skip("row locks: SQLite locks the whole database")


def tables_locked(action: Callable[[], object]) -> list[str]:
    """The tables of ORDER in the order the action first locks a row of each (an UPDATE, or a
    SELECT ... FOR UPDATE)."""
    with CaptureQueriesContext(connection) as queries:
        action()
    first: list[str] = []
    for query in queries.captured_queries:
        match = _UPDATE.match(query["sql"]) or _LOCK.match(query["sql"])
        if match and match.group(1) in ORDER and match.group(1) not in first:
            first.append(match.group(1))
    return first


def assert_in_order(tables: list[str]) -> None:
    ranks = [ORDER[t] for t in tables]
    assert ranks == sorted(ranks), tables


def placed_workloads() -> tuple[Workload, Workload]:
    factories.nodes(1)
    owner = factories.tenant()
    factories.workload(owner, "whole", pods=2, gpus=2, cpu_milli=2000)
    factories.workload(owner, "shares", pods=3, gpu_milli=300)
    cluster, decisions = schedule_pending()
    bound = tables_locked(
        lambda: services.placements_commit(
            cluster=cluster, placed=decisions, scheduler="s", now=timezone.now()
        )
    )
    assert_in_order(bound)
    assert {"scheduling_workload", "scheduling_node", "scheduling_gpu"} <= set(bound)
    return Workload.objects.get(name="whole"), Workload.objects.get(name="shares")


def pods_of(workload: Workload) -> list[Pod]:
    return list(Pod.objects.filter(workload=workload).select_related("workload__tenant"))


def test_a_bind_and_an_eviction_lock_in_the_one_order() -> None:
    whole, shares = placed_workloads()
    evicted = tables_locked(
        lambda: services.workloads_evict(
            workloads=[whole, shares], reason="room", now=timezone.now()
        )
    )
    assert_in_order(evicted)
    assert evicted[0] == "scheduling_workload" and "scheduling_gpu" in evicted


def test_a_cancel_locks_in_the_one_order() -> None:
    whole, _ = placed_workloads()
    cancelled = tables_locked(lambda: services.workload_cancel(workload=whole))
    assert_in_order(cancelled)
    assert cancelled[0] == "scheduling_workload" and "scheduling_gpu" in cancelled


def test_pods_starting_and_ending_lock_their_workloads_first() -> None:
    whole, shares = placed_workloads()
    started = tables_locked(lambda: services.pods_start(pods=pods_of(whole), now=timezone.now()))
    assert_in_order(started)
    finished = tables_locked(lambda: services.pods_finish(pods=pods_of(whole), now=timezone.now()))
    assert_in_order(finished)
    assert finished[0] == "scheduling_workload" and "scheduling_node" in finished

    services.workloads_evict(
        workloads=[shares],
        reason="room",
        now=timezone.now(),
        terminating={str(p.uid) for p in pods_of(shares)},
    )
    terminating = [p for p in pods_of(shares) if p.phase == Pod.Phase.TERMINATING]
    gone = tables_locked(lambda: services.pods_terminated(pods=terminating, now=timezone.now()))
    assert_in_order(gone)
