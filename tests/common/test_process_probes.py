"""Every role's `--metrics-port` (common/process_metrics.py): /metrics, /healthz and /readyz, in
real processes of runscheduler and ingesttelemetry (runkube's and runextender's are in tests/kube/),
and the rules the loop keeps for them (common/loop.py), on an injected clock."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.core.management.base import CommandError
from django.db import connection

from common.loop import LoopCommand
from common.process_metrics import LoopHealth, heartbeat, register_health
from scheduling.models import Lease
from telemetry.exposition import GpuState
from tests.dashboard.servers import database_url, free_port
from tests.scheduling import factories
from tests.telemetry.servers import FakeExporter, http_get, wait_for
from tests.test_observability import running, scrape_until, value


def probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    status, body = http_get(f"http://127.0.0.1:{port}{path}")
    return status, json.loads(body)


def wait_for_probe(port: int, path: str, code: int, **expected: Any) -> dict[str, Any]:
    """Poll a probe until it answers HTTP `code` with `expected` among its fields; that body."""

    def check() -> dict[str, Any] | None:
        got, body = probe(port, path)
        return body if got == code and expected.items() <= body.items() else None

    result: dict[str, Any] = wait_for(check, timeout=60)
    return result


# --- the rules, on an injected clock -------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_liveness_fails_once_a_step_overruns_its_budget() -> None:
    clock = Clock()
    health = LoopHealth(stuck_after_s=10, clock=clock)
    clock.now += 9
    assert health.liveness()[0]  # starting up counts as one step
    clock.now += 2
    assert health.liveness() == (
        False,
        {"status": "stuck", "overdue_s": 1.0, "stuck_after_s": 10},
    )
    health.step_started()
    clock.now += 10
    assert health.liveness() == (True, {"status": "ok"})
    clock.now += 0.5
    ok, body = health.liveness()
    assert not ok and body["overdue_s"] == 0.5


def test_liveness_allows_the_wait_the_loop_chose() -> None:
    clock = Clock()
    health = LoopHealth(stuck_after_s=10, clock=clock)
    health.step_started()
    health.step_finished(wait=5.0)  # a standby sleeps a third of its lease between tries
    clock.now += 15
    assert health.liveness()[0]
    clock.now += 1
    assert not health.liveness()[0]


def test_a_long_step_that_reports_progress_stays_alive() -> None:
    clock = Clock()
    health = LoopHealth(stuck_after_s=10, clock=clock)
    register_health(health)
    try:
        health.step_started()
        for _ in range(5):  # five eviction batches of 8 s each: 40 s, never 10 s without progress
            clock.now += 8
            heartbeat()
            assert health.liveness()[0]
        clock.now += 10.5  # then it stopped
        assert not health.liveness()[0]
    finally:
        register_health(None)
    heartbeat()  # no loop runs in this process: nothing to tell


def test_readiness_follows_the_last_step() -> None:
    health = LoopHealth(stuck_after_s=10)
    assert health.readiness() == (
        False,
        {"status": "unready", "state": "starting: no step has finished yet"},
    )
    health.state = "standing by"
    health.step_finished(wait=1)
    assert health.readiness() == (True, {"status": "ready", "state": "standing by"})
    health.step_failed(ConnectionError("server closed the connection"), wait=0.5)
    assert health.readiness() == (
        False,
        {
            "status": "unready",
            "state": "the last step failed: ConnectionError: server closed the connection",
        },
    )


class Steps(LoopCommand):
    """A loop whose steps are given: each a wait, or an exception to raise."""

    def __init__(self, *steps: float | Exception) -> None:
        super().__init__()
        self.steps = list(steps)
        self.max_backoff = 0.01

    def step(self) -> float:
        outcome = self.steps.pop(0)
        if not self.steps:
            self.shutdown = True
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def test_the_loop_reports_a_failed_step_and_recovers() -> None:
    failing = Steps(0.0, RuntimeError("boom"))
    failing.run_loop(failing.step, loop=True)
    assert failing.failed_steps == 1
    assert failing.health.readiness()[1]["state"] == "the last step failed: RuntimeError: boom"
    recovered = Steps(RuntimeError("boom"), 0.0)
    recovered.run_loop(recovered.step, loop=True)
    assert recovered.health.readiness() == (True, {"status": "ready", "state": "ok"})


def test_a_command_error_ends_the_loop_even_with_loop() -> None:
    """A scheduler that lost its lease must exit (to be restarted as a standby), not retry."""
    lost = Steps(CommandError("lost lease gpu-system/gpusched-scheduler; exiting"), 0.0)
    with pytest.raises(CommandError, match="lost lease"):
        lost.run_loop(lost.step, loop=True)
    assert lost.steps == [0.0]


# --- real processes ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_runscheduler_probes_say_leading_standing_by_and_ready(tmp_path: Path) -> None:
    factories.nodes(1)
    factories.workload(factories.tenant(), "job", pods=2, gpus=1)
    leader_port, standby_port = free_port(), free_port()
    argv = ["runscheduler", "--loop", "--profile", "topology", "--interval", "0.05"]
    with running(
        [*argv, "--identity", "a", "--metrics-port", str(leader_port)],
        log=tmp_path / "leader.log",
        env={},
    ):
        series = scrape_until(
            f"http://127.0.0.1:{leader_port}/metrics",
            lambda s: value(s, "gpusched_scheduling_attempts_total", result="scheduled") == 2,
        )
        assert value(series, "gpusched_scheduler_leader") == 1
        assert value(series, "gpusched_nodes_quarantined") == 0
        assert probe(leader_port, "/healthz") == (200, {"status": "ok"})
        assert probe(leader_port, "/readyz") == (200, {"status": "ready", "state": "leading"})
        with running(
            [*argv, "--identity", "b", "--metrics-port", str(standby_port)],
            log=tmp_path / "standby.log",
            env={},
        ):
            wait_for_probe(standby_port, "/readyz", 200, state="standing by")
            assert probe(standby_port, "/healthz")[0] == 200
            standby = scrape_until(
                f"http://127.0.0.1:{standby_port}/metrics",
                lambda s: value(s, "gpusched_scheduler_leader") == 0,
            )
            assert value(standby, "gpusched_scheduling_attempts_total", result="scheduled") == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_runscheduler_liveness_fails_while_its_cycle_is_stuck_and_recovers(
    tmp_path: Path,
) -> None:
    """Fault: every cycle blocks on a lock held elsewhere (the lease table, ACCESS EXCLUSIVE).

    Expected: /healthz turns 503 "stuck" once the cycle runs past --stuck-intervals x --interval
    (here 1 s), and 200 again once the lock goes and the loop turns."""
    if connection.vendor != "postgresql":
        pytest.skip("holds a PostgreSQL table lock (runs in the PostgreSQL pass)")
    port = free_port()
    argv = ["runscheduler", "--loop", "--profile", "topology", "--interval", "0.05"]
    argv += ["--stuck-intervals", "20", "--metrics-port", str(port)]
    with running(argv, log=tmp_path / "scheduler.log", env={}):
        wait_for_probe(port, "/readyz", 200, state="leading")
        with psycopg.connect(database_url()) as blocker:
            blocker.execute(f"LOCK TABLE {Lease._meta.db_table} IN ACCESS EXCLUSIVE MODE")
            stuck = wait_for_probe(port, "/healthz", 503, status="stuck")
            assert stuck["stuck_after_s"] == 1.0 and stuck["overdue_s"] > 0
            blocker.rollback()
        wait_for_probe(port, "/healthz", 200, status="ok")


@pytest.mark.django_db(transaction=True)
def test_ingesttelemetry_probes_follow_its_cycles(tmp_path: Path) -> None:
    states = [GpuState(hostname="node-1", gpu=0, uuid="GPU-node-1-0")]
    port = free_port()
    with FakeExporter(states) as exporter:
        argv = ["ingesttelemetry", "--loop", "--interval", "0.2", "--targets", exporter.url]
        with running([*argv, "--metrics-port", str(port)], log=tmp_path / "ingest.log", env={}):
            wait_for_probe(port, "/readyz", 200, state="ok")
            assert probe(port, "/healthz") == (200, {"status": "ok"})
            series = scrape_until(
                f"http://127.0.0.1:{port}/metrics",
                lambda s: (
                    (value(s, "gpusched_telemetry_ingest_cycles_total", result="ok") or 0) >= 1
                ),
            )
            assert value(series, "gpusched_telemetry_gpus_reporting") == 1
