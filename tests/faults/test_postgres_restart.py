"""PostgreSQL restarted under load, on a private cluster (the machine's server is never touched)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from scheduling.models import Pod
from tests.dashboard.servers import web_server
from tests.faults.servers import (
    ROOT,
    Api,
    manage,
    private_postgres,
    process_env,
    stop,
    tail,
    wait_for,
    workload_body,
)

WORKLOADS = 30
PODS_PER_WORKLOAD = 4


def count_pods(url: str, where: str, *params: object) -> int:
    """Pods of the private database matching an SQL condition (the test process's ORM is on
    the test database, not this one)."""
    query = sql.SQL("SELECT count(*) FROM {} WHERE ").format(sql.Identifier(Pod._meta.db_table))
    with psycopg.connect(url, connect_timeout=2) as conn:
        row = conn.execute(query + sql.SQL(where), params).fetchone()
        return int(row[0]) if row else 0


def bound_pods(url: str) -> int:
    return count_pods(url, "phase = 'Bound'")


def bound_after(url: str, moment: float) -> int:
    return count_pods(url, "bound_at > to_timestamp(%s)", moment)


def dbtool(url: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "tests.faults.dbtool", *args],
        cwd=ROOT,
        env=process_env(url),
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


@pytest.mark.slow
def test_postgres_restart_under_load_loses_and_doubles_nothing(tmp_path: Path) -> None:
    """Fault: the database server restarts (`pg_ctl stop -m fast`, down about 1.5 s, start) while
    tenants submit workloads through the REST API and `runscheduler --loop` is placing them.

    Expected: the scheduler process survives the outage (it reconnects; it is not left to a
    supervisor to restart) and keeps placing; the web process answers again; clients that retry
    with an Idempotency-Key get each workload created once; in the end every submitted pod is
    Bound exactly once and no GPU is over-committed (used_milli within 0..1000 and equal to what
    its active assignments hold)."""
    with private_postgres() as pg:
        url = pg.create_database("gpusched")
        token = json.loads(dbtool(url, "setup", "25"))["token"]  # 200 H100s, tenant team-a

        scheduler_log = tmp_path / "runscheduler.log"
        scheduler = manage(
            "runscheduler", "--loop", "--profile", "topology", "--interval", "0.05",
            "--batch", "16", "--lease-seconds", "5",
            database_url=url, log=scheduler_log,
        )  # fmt: skip
        web_log = tmp_path / "web.log"
        try:
            environment = {
                "DATABASE_URL": url,
                "GPUSCHED_API_RATE": "100000/min",
                "GPUSCHED_API_SUBMIT_RATE": "100000/min",
            }
            with web_server(log=web_log, environment=environment) as base:
                api = Api(base, token)
                accepted: list[str] = []
                failed_tries: list[int] = []

                def submit(first: int, last: int) -> None:
                    for k in range(first, last):
                        name = f"w-{k:02d}"
                        share = k % 3 == 0
                        body = workload_body(
                            name,
                            pods=PODS_PER_WORKLOAD,
                            gpus=0 if share else 1,
                            gpu_milli=500 if share else 0,
                        )
                        failed_tries.append(api.submit_until_accepted(body))
                        accepted.append(name)
                        time.sleep(0.1)

                # A first third placed; the rest comes in while the database restarts.
                submit(0, WORKLOADS // 3)
                wait_for(lambda: bound_pods(url) >= 8, timeout=30, interval=0.05)
                submitter = threading.Thread(target=submit, args=(WORKLOADS // 3, WORKLOADS))
                submitter.start()
                wait_for(lambda: len(accepted) > WORKLOADS // 3, timeout=30, interval=0.05)
                pg.stop("fast")
                time.sleep(1.5)  # the outage itself: down for as long as the docstring says
                pg.start()
                back_at = time.time()
                submitter.join(timeout=90)
                assert not submitter.is_alive()

                total = WORKLOADS * PODS_PER_WORKLOAD
                try:
                    wait_for(lambda: bound_pods(url) == total, timeout=45, interval=0.2)
                except AssertionError:
                    code = scheduler.poll()
                    state = "alive" if code is None else f"exited {code}"
                    raise AssertionError(
                        f"{bound_pods(url)}/{total} pods bound; scheduler {state}:\n"
                        f"{tail(scheduler_log)}"
                    ) from None
                assert scheduler.poll() is None, f"runscheduler died:\n{tail(scheduler_log)}"
                assert "step failed" in scheduler_log.read_text(), "no outage seen"
                assert bound_after(url, back_at) > 0, "nothing was placed after the restart"
                assert sum(failed_tries) > 0, "the API never saw the outage"
                assert api.get("/api/v1/workloads?limit=5")[0] == 200
        finally:
            stop(scheduler)

        report = json.loads(dbtool(url, "check"))
        assert report["problems"] == []
        assert report["workloads"] == sorted(accepted) and len(accepted) == WORKLOADS
        assert set(report["pods_per_workload"].values()) == {PODS_PER_WORKLOAD}
        assert report["phases"] == {"Bound": WORKLOADS * PODS_PER_WORKLOAD}
