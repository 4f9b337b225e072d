"""`manage.py bench_stack`, tiny: 2 tenants, 5 dashboards in one client process, 3 seconds, on the
machine's PostgreSQL and Redis, as a real process. Checks the report's shape and that nothing
failed, not speed: so the dashboards share one client process (the default spreads them over four,
each a process started and importing for a handful of sockets) and the load lasts 3 s, still three
times the 1 s a placed workload is held before its cancel, which the report must show."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bench.compose import ROOT
from bench.loopback import with_redis_db

TEST_REDIS_DB = 14  # not the default database that the other tests share


@pytest.mark.slow
def test_bench_stack_reports_a_clean_run(postgres_server_url: str, redis_server_url: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUSCHED_")}
    env["DATABASE_URL"] = postgres_server_url
    result = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "bench_stack",
            "--tenants",
            "2",
            "--dashboards",
            "5",
            "--duration",
            "3",
            "--nodes",
            "8",
            "--hold",
            "0",
            "--client-processes",
            "1",
            "--redis-url",
            with_redis_db(redis_server_url, TEST_REDIS_DB),
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)

    assert report["errors"]["total"] == 0, report["errors"]
    assert report["shutdown"]["killed"] == []
    assert set(report["shutdown"]["exit_codes"].values()) == {0}
    assert {"migrate", "web", "scheduler", "simulator"} <= set(report["config"]["roles"])

    submit = report["submit"]
    assert submit["workloads"] > 0 and submit["pods"] >= submit["workloads"]
    assert submit["workloads_per_s"] > 0 and submit["pods_per_s"] > 0
    assert submit["cancelled"] > 0  # --hold 0: each workload is cancelled once seen placed
    for endpoint in (
        "POST /api/v1/workloads",
        "GET /api/v1/workloads",
        "GET /api/v1/workloads/{name}/pods",
        "POST /api/v1/workloads/{name}/cancel",
    ):
        stats = report["api_latency_ms"][endpoint]
        assert stats["samples"] > 0, endpoint
        assert 0 < stats["p50"] <= stats["p95"] <= stats["p99"], endpoint

    bound = report["submit_to_bound_ms"]
    assert bound["samples"] > 0 and bound["p50"] <= bound["p95"] <= bound["p99"]
    assert bound["workloads_unbound_at_end"] == 0
    assert report["scheduler"]["pods_bound"] > 0
    cycles = report["scheduler"]["cycles"]
    assert cycles["busy"] > 0 and cycles["pods_bound"] >= report["scheduler"]["pods_bound"]

    dashboard = report["dashboard"]
    assert dashboard["clients"] == 5 and dashboard["dropped"] == 0
    delta = dashboard["commit_to_delta_ms"]
    assert delta["samples"] == 5 * dashboard["changes"] and delta["missing"] == 0
    assert delta["p95"] > 0

    for role in ("web", "scheduler", "simulator", "bench_clients"):
        assert report["cpu"][role]["cpu_s"] >= 0
    assert report["machine"]["loadavg_start"] and report["config"]["gpus"] == 64
