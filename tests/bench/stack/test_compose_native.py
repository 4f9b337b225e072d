"""docker-compose.yml's process set, run natively (bench/stack.py), end to end.

migrate, web (`runweb`), scheduler, simulator and ingester run as real processes of their compose
commands and environments (debug off, GPUSCHED_SECRET_KEY from the environment as compose asks),
on a fresh PostgreSQL database and Redis, with the Debian Prometheus scraping the simulator from
deploy/compose/prometheus.yml. Three things are shortened so the test takes seconds rather than
minutes and little CPU: Prometheus scrapes every second (compose: 15 s), the ingester cycles
every second (its default: 15 s), and the simulator runs two 8-GPU servers and no arrivals of
its own (compose: the demo cluster's 16 servers and four tenants' streams, which kept the
scheduler and the simulator busy for nothing the test looks at). A tenant made with
`createtenant` submits through the REST API; the scheduler binds the pods; Prometheus holds the
simulator's DCGM series; the ingester stores them.
"""

from __future__ import annotations

import json
import secrets
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml

from bench.compose import ROOT
from bench.loopback import http_get, scratch_postgres_database, with_redis_db
from bench.stack import NativeStack

PROMETHEUS_CONFIG = ROOT / "deploy" / "compose" / "prometheus.yml"
TEST_REDIS_DB = 13  # not the default database that the other tests share
# Enough for the test's workload (two pods of one GPU each) and for the DCGM series of more than
# one host; any cluster proves the process set works, none needs the demo's traffic.
SMALL_CLUSTER = "nodePools:\n- {name: l40s, count: 2, topology: pcie-8gpu-2socket}\n"


def api(
    base: str, method: str, path: str, token: str, body: dict[str, Any] | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"{base}{path}",
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def wait_for(check: Any, timeout: float, what: str, stack: NativeStack) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        stack.check_running()  # a role that died fails here, with its log
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {n}\n{stack.log_tail(n, 15)}" for n in stack.order)
            raise AssertionError(f"{what}: not within {timeout} s\n{logs}")
        time.sleep(0.3)


def prometheus_query(stack: NativeStack, query: str) -> list[dict[str, Any]]:
    url = stack.url("prometheus", 9090, "/api/v1/query?" + urllib.parse.urlencode({"query": query}))
    status, body = http_get(url)
    assert status == 200, body
    result: list[dict[str, Any]] = json.loads(body)["data"]["result"]
    return result


@pytest.mark.slow
def test_the_compose_stack_runs_natively_end_to_end(
    tmp_path: Path, postgres_server_url: str, redis_server_url: str, prometheus_binary: str
) -> None:
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(SMALL_CLUSTER)
    with scratch_postgres_database(postgres_server_url) as database_url:
        stack = NativeStack(
            tmp_path,
            # What compose requires from the environment (the password is unused natively: the
            # database is the fresh one below).
            env={
                "GPUSCHED_SECRET_KEY": secrets.token_urlsafe(32),
                "GPUSCHED_DB_PASSWORD": secrets.token_urlsafe(16),
                "GPUSCHED_METRICS_TOKEN": secrets.token_urlsafe(16),
            },
            external={
                "postgres": database_url,
                "redis": with_redis_db(redis_server_url, TEST_REDIS_DB),
            },
            scrape_interval="1s",
            extra_args={"ingester": ["--interval", "1"], "simulator": ["--cluster", str(cluster)]},
        )
        assert stack.order.index("migrate") < stack.order.index("web")
        with stack.start(timeout=90):
            # depends_on: migrate ran to completion before any role that needs it started.
            assert stack.exit_codes == {} and stack.running["migrate"].process.returncode == 0
            migrated = stack.timings["migrate_exited_s"]
            for role in ("web", "scheduler", "simulator", "ingester"):
                assert stack.timings[f"{role}_started_s"] >= migrated, stack.timings
            # ... and the ingester only once Prometheus was ready.
            assert stack.timings["ingester_started_s"] >= stack.timings["prometheus_healthy_s"]

            web = stack.url("web", 8000)
            status, body = http_get(f"{web}/healthz")
            assert (status, json.loads(body)) == (200, {"status": "ok"})
            assert http_get(stack.url("prometheus", 9090, "/-/ready"))[0] == 200
            assert "GPUSCHED_DEBUG" not in stack.env_of("web")  # production settings

            # A tenant from the management command, in the web role's environment.
            created = json.loads(
                stack.run(
                    "web",
                    "python",
                    "manage.py",
                    "createtenant",
                    "team-a",
                    "--quota",
                    "nvidia.com/gpu=8",
                    "--json",
                )
            )
            token = created["token"]

            # A workload through the REST API gets its pods bound by the scheduler.
            request = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}
            status, workload = api(
                web,
                "POST",
                "/api/v1/workloads",
                token,
                {
                    "name": "stack-smoke",
                    "queueName": created["queueName"],
                    "podSets": [
                        {
                            "name": "main",
                            "count": 2,
                            "template": {"resources": {"requests": request}},
                        }
                    ],
                },
            )
            assert status == 201, workload

            def bound() -> list[dict[str, Any]] | None:
                status, doc = api(web, "GET", "/api/v1/workloads/stack-smoke/pods", token)
                assert status == 200, doc
                pods = doc["items"]
                return pods if pods and all(p["boundAt"] and p["node"] for p in pods) else None

            pods = wait_for(bound, 30, "the workload's pods bound", stack)
            assert len(pods) == 2
            for pod in pods:
                assert pod["phase"] in ("Bound", "Running")
                assert len(pod["gpus"]) == 1 and pod["gpus"][0]["milli"] == 1000

            # Prometheus scraped the simulator's dcgm-exporter endpoint ...
            series = wait_for(
                lambda: prometheus_query(stack, "DCGM_FI_DEV_GPU_UTIL"),
                30,
                "DCGM_FI_DEV_GPU_UTIL in Prometheus",
                stack,
            )
            assert {s["metric"]["job"] for s in series} == {"nvidia-dcgm-exporter"}
            hosts = {s["metric"]["Hostname"] for s in series}

            # Every scrape target of deploy/compose/prometheus.yml answers: the exporter and
            # gpusched's own /metrics.
            def targets_up() -> list[dict[str, Any]] | None:
                status, body = http_get(stack.url("prometheus", 9090, "/api/v1/targets"))
                active: list[dict[str, Any]] = json.loads(body)["data"]["activeTargets"]
                return active if active and all(t["health"] == "up" for t in active) else None

            targets = wait_for(targets_up, 20, "every Prometheus target up", stack)
            config = yaml.safe_load(PROMETHEUS_CONFIG.read_text())
            jobs = {job["job_name"] for job in config["scrape_configs"]}
            assert {t["labels"]["job"] for t in targets} == jobs

            # ... and the ingester stored it: every GPU's latest values, from Prometheus.
            def ingested() -> int:
                with psycopg.connect(database_url) as conn:
                    row = conn.execute(
                        "SELECT count(*) FROM telemetry_gpulatest "
                        "WHERE source = 'prometheus' AND gpu_util IS NOT NULL"
                    ).fetchone()
                return int(row[0]) if row else 0

            # One row per GPU; a shared GPU has one series per holder (dcgm-exporter's labels).
            gpus = {(s["metric"]["Hostname"], s["metric"]["gpu"]) for s in series}
            wait_for(lambda: ingested() >= len(gpus), 30, "GpuLatest rows", stack)
            with psycopg.connect(database_url) as conn:
                stored = {
                    row[0]
                    for row in conn.execute(
                        "SELECT DISTINCT node FROM telemetry_gpulatest WHERE source = 'prometheus'"
                    )
                }
            assert hosts <= stored
            assert {p["node"] for p in pods} <= stored

        # SIGTERM stopped every role cleanly (no SIGKILL needed).
        assert stack.killed == []
        assert stack.exit_codes == dict.fromkeys(stack.exit_codes, 0), stack.exit_codes
        assert set(stack.exit_codes) == {
            "migrate",
            "web",
            "scheduler",
            "simulator",
            "prometheus",
            "ingester",
        }
