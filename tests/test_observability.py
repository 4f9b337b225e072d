"""gpusched's own observability: the web process's /metrics (read from the database at scrape
time), the scheduler's and the ingester's metrics endpoints as real processes, /healthz and
/readyz, and JSON log lines."""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from asgiref.sync import sync_to_async
from django.db import connection, connections
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Max
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dashboard.selectors import cluster as cluster_docs
from dashboard.tailer import Tailer
from gpusched.log_formats import JsonFormatter
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.models import Event, Node, Pod
from scheduling.profile_files import load_profile
from scheduling.worker import metrics as scheduler_metrics
from scheduling.worker.database_side import database_cycle
from telemetry import services as telemetry_services
from telemetry.exposition import GpuState
from tests.dashboard.conftest import (
    REDIS_URL,
    admin_cookie,
    connect,
    layer_settings,
    redis_available,
)
from tests.dashboard.servers import database_url, free_port
from tests.scheduling import factories
from tests.telemetry import factories as telemetry_factories
from tests.telemetry.servers import FakeExporter, http_get, wait_for

ROOT = Path(__file__).resolve().parents[1]

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Series:
    """Every sample of a text exposition, by sample name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(series: Series, name: str, **labels: str) -> float | None:
    return series.get((name, frozenset(labels.items())))


def scrape(client: Client | None = None) -> Series:
    response = (client or Client()).get("/metrics")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    return parse(response.content.decode())


def scrape_until(url: str, done: Callable[[Series], bool], timeout: float = 60) -> Series:
    """Scrape a process's endpoint until `done` holds for what it serves; that scrape."""

    def check() -> Series | None:
        status, body = http_get(url)
        series = parse(body.decode()) if status == 200 else {}
        return series if done(series) else None

    result: Series = wait_for(check, timeout=timeout)
    return result


# --- /metrics of the web process ----------------------------------------------------------------

QUEUES = """
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
---
kind: ClusterQueue
metadata: {name: research}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]
---
kind: ClusterQueue
metadata: {name: idle}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
kind: LocalQueue
metadata: {name: default, namespace: team-a}
spec: {clusterQueue: research}
"""


@pytest.mark.django_db
@pytest.mark.postgres
def test_metrics_report_queues_pods_gpus_outbox_and_telemetry(client: Client, settings) -> None:
    settings.STRANDED_MAX_AGE_S = 0.0  # judged afresh at this scrape
    factories.nodes(1)  # one DGX H100: 8 GPUs
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))
    owner = factories.tenant("team-a")
    factories.workload(owner, "fits", gpus=4)
    factories.workload(owner, "waits", gpus=4)  # the queue's quota is taken by "fits"
    database_cycle(Framework(load_profile("topology")), identity="w1").run_once()
    now = timezone.now()
    telemetry_services.samples_ingest(
        gpus=[telemetry_factories.sample("node-x", 0), telemetry_factories.sample("node-x", 1)],
        observed_at=now - timedelta(seconds=30),
        source="scrape",
    )
    telemetry_services.source_status_record(name="scrape", now=now - timedelta(seconds=30))
    for _ in range(2):
        telemetry_services.source_status_record(name="prometheus", error="connection refused")

    series = scrape(client)

    assert value(series, "gpusched_database_up") == 1
    assert value(series, "gpusched_queue_pending_workloads", cluster_queue="research") == 1
    assert value(series, "gpusched_queue_pending_workloads", cluster_queue="idle") == 0
    # "waits" is not admitted: its pod waits for quota, not for a node.
    assert value(series, "gpusched_queue_pending_pods", cluster_queue="research") == 0
    assert value(series, "gpusched_queue_pods_waiting_for_quota", cluster_queue="research") == 1
    assert value(series, "gpusched_pods_waiting", **{"for": "quota"}) == 1
    assert value(series, "gpusched_pods_waiting", **{"for": "node"}) == 0
    assert value(series, "gpusched_queue_admitted_workloads", cluster_queue="research") == 1
    assert value(series, "gpusched_queue_admitted_workloads", cluster_queue="idle") == 0
    assert value(series, "gpusched_workloads", state="Pending") == 1
    assert value(series, "gpusched_workloads", state="Admitted") == 1
    assert value(series, "gpusched_pods", phase="Pending") == 1
    assert value(series, "gpusched_pods", phase="Bound") == 1
    assert value(series, "gpusched_pods", phase="Running") == 0
    assert value(series, "gpusched_nodes", state="schedulable") == 1
    assert value(series, "gpusched_nodes", state="cordoned") == 0
    assert value(series, "gpusched_nodes_allocated") == 1
    assert value(series, "gpusched_gpus") == 8
    assert value(series, "gpusched_gpus_in_use") == 4
    assert value(series, "gpusched_gpus_allocated") == 4.0
    stranded = cluster_docs.cluster_stranded()  # the Cluster page's figure
    assert value(series, "gpusched_gpus_stranded") == stranded["stranded"]
    assert value(series, "gpusched_nodes_stranded") == stranded["stranded_nodes"]
    head = Event.objects.aggregate(newest=Max("id"))["newest"]
    assert head and value(series, "gpusched_outbox_head_event_id") == head
    assert value(series, "gpusched_outbox_lag_events") == 0  # no dashboard open here
    assert value(series, "gpusched_outbox_lag_seconds") == 0
    sample_age = value(series, "gpusched_telemetry_sample_age_seconds", source="scrape")
    success_age = value(
        series, "gpusched_telemetry_source_last_success_age_seconds", source="scrape"
    )
    assert sample_age is not None and 30 <= sample_age < 90
    assert success_age is not None and 30 <= success_age < 90
    assert value(
        series, "gpusched_telemetry_source_last_success_age_seconds", source="prometheus"
    ) == float("inf")
    assert value(series, "gpusched_telemetry_source_consecutive_failures", source="prometheus") == 2
    assert value(series, "gpusched_telemetry_nodes", state="fresh") == 1
    assert value(series, "process_cpu_seconds_total") is not None  # the process families too
    # Aggregates only: no tenant, workload or node names on an endpoint without authentication.
    text = client.get("/metrics").content.decode()
    leaked = {"team-a", "fits", "waits", "node-x"} & set(text.replace('"', " ").split())
    assert not leaked, [line for line in text.splitlines() if any(w in line for w in leaked)]


@pytest.mark.django_db(transaction=True)
async def test_metrics_count_dashboard_sockets_and_the_tailers_outbox_lag() -> None:
    nodes = await sync_to_async(factories.nodes)(1)

    def sockets(series: Series) -> float:
        return value(series, "gpusched_websocket_clients", view="cluster") or 0

    # A tailer that, once it has built the view, sleeps: the outbox runs ahead of it.
    slow_tailer = override_settings(
        CHANNEL_LAYERS=layer_settings("memory"), DASHBOARD_POLL_SECONDS=60
    )
    before = await sync_to_async(scrape)()
    with slow_tailer:
        try:
            client = await connect("ws/live/cluster/", await admin_cookie())
            snapshot = await client.receive()
            watched = await sync_to_async(scrape)()
            assert sockets(watched) == sockets(before) + 1
            assert value(watched, "gpusched_outbox_lag_events") == 0

            def cordon() -> int:
                services.node_set_cordoned(node=Node.objects.get(pk=nodes[0].pk), cordoned=True)
                return Event.objects.aggregate(newest=Max("id"))["newest"]

            head = await sync_to_async(cordon)()
            lagging = await sync_to_async(scrape)()
            assert head > snapshot["id"]
            assert value(lagging, "gpusched_outbox_lag_events") == head - snapshot["id"]
            lag_seconds = value(lagging, "gpusched_outbox_lag_seconds")
            assert lag_seconds is not None and 0 <= lag_seconds < 30

            await client.socket.disconnect()
            after = await sync_to_async(scrape)()
            assert sockets(after) == sockets(before)
        finally:
            await Tailer.stop_all()
            await sync_to_async(connections.close_all)()


# --- the scheduler's metrics -------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.postgres
def test_scheduler_metrics_count_what_a_real_cycle_did() -> None:
    factories.nodes(1)  # 8 GPUs
    owner = factories.tenant()
    factories.workload(owner, "small", pods=3, gpus=2)
    factories.workload(owner, "huge", gpus=16)  # fits on no node
    before = parse(generate_latest(scheduler_metrics.registry).decode())

    report = database_cycle(Framework(load_profile("topology")), identity="w1").run_once()
    scheduler_metrics.record_cycle(report)

    after = parse(generate_latest(scheduler_metrics.registry).decode())

    def grew(name: str, **labels: str) -> float:
        return (value(after, name, **labels) or 0) - (value(before, name, **labels) or 0)

    assert (report.bound, report.unschedulable) == (3, 1)
    assert grew("gpusched_scheduling_attempts_total", result="scheduled") == 3
    assert grew("gpusched_scheduling_attempts_total", result="unschedulable") == 1
    assert grew("gpusched_scheduling_attempts_total", result="conflict") == 0
    assert grew("gpusched_workloads_admitted_total") == 2
    assert value(after, "gpusched_scheduler_leader") == 1
    assert grew("gpusched_scheduling_cycle_duration_seconds_count") == 1
    assert grew("gpusched_scheduling_phase_duration_seconds_count", phase="schedule") == 1
    assert grew("gpusched_scheduling_pod_duration_seconds_count") == 4
    assert grew("gpusched_evictions_total", reason="preemption") == 0


@contextmanager
def running(argv: list[str], *, log: Path, env: dict[str, str]) -> Iterator[None]:
    """A manage.py command on the test database until the block ends; then SIGTERM. Its log
    (stderr) goes to `log`."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", *argv],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": database_url(), **env},
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
        try:
            yield
            assert process.poll() is None, "the command died"
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=20)


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_runscheduler_serves_its_metrics_and_logs_json_lines(tmp_path: Path) -> None:
    factories.nodes(4)  # 32 GPUs
    owner = factories.tenant()
    for k in range(4):
        factories.workload(owner, f"job-{k}", pods=5, gpus=1)
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = tmp_path / "runscheduler.log"
    argv = ["runscheduler", "--loop", "--profile", "topology", "--interval", "0.05"]
    env = {"GPUSCHED_LOG_FORMAT": "json", "GPUSCHED_LOG_LEVEL": "INFO"}

    with running([*argv, "--metrics-port", str(port)], log=log, env=env):
        series = scrape_until(
            url, lambda s: value(s, "gpusched_scheduling_attempts_total", result="scheduled") == 20
        )
        assert Pod.objects.filter(phase="Bound").count() == 20
        assert value(series, "gpusched_scheduler_leader") == 1
        assert value(series, "gpusched_workloads_admitted_total") == 4
        assert value(series, "gpusched_scheduling_attempts_total", result="conflict") == 0
        assert (value(series, "gpusched_scheduling_cycle_duration_seconds_count") or 0) >= 1
        assert value(series, "process_resident_memory_bytes")

    lines = [json.loads(line) for line in log.read_text().splitlines()]  # every line is JSON
    cycles = [line for line in lines if line["logger"] == "scheduling.worker.cycle"]
    assert cycles and sum(line["bound"] for line in cycles) == 20
    assert sum(line["admitted"] for line in cycles) == 4
    first = cycles[0]
    assert {"ts", "level", "process", "attempted", "unschedulable", "schedule_s"} <= set(first)
    assert first["level"] == "INFO" and first["message"].startswith("cycle: ")


# --- the ingester's metrics --------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_ingesttelemetry_serves_its_metrics(tmp_path: Path) -> None:
    states = [GpuState(hostname="node-1", gpu=k, uuid=f"GPU-node-1-{k}") for k in range(2)]
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    with FakeExporter(states) as exporter:
        exporter.body = exporter.text() + 'DCGM_FI_DEV_GPU_UTIL{gpu="9" 1\n'  # one bad line
        argv = ["ingesttelemetry", "--loop", "--interval", "0.2", "--targets", exporter.url]
        with running([*argv, "--metrics-port", str(port)], log=tmp_path / "ingest.log", env={}):
            series = scrape_until(
                url,
                lambda s: (
                    (value(s, "gpusched_telemetry_ingest_cycles_total", result="ok") or 0) >= 2
                ),
            )
    assert value(series, "gpusched_telemetry_gpus_reporting") == 2
    assert (value(series, "gpusched_telemetry_samples_ingested_total") or 0) > 0
    assert (
        value(series, "gpusched_telemetry_lines_skipped_total", reason="invalid labels") or 0
    ) >= 2
    assert value(series, "gpusched_telemetry_ingest_cycles_total", result="failed") == 0
    last_success = value(series, "gpusched_telemetry_last_success_timestamp_seconds")
    assert last_success and abs(last_success - timezone.now().timestamp()) < 60


# --- /healthz and /readyz ----------------------------------------------------------------------


def test_healthz_is_liveness_only(client: Client) -> None:
    # No database access allowed in this test: liveness must not depend on it.
    response = client.get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.django_db
@pytest.mark.postgres
def test_readyz_is_ready_with_the_database_migrated(client: Client) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {
        "status": "ok",
        "failed": [],
        "checks": {"database": "ok", "migrations": "ok", "channel_layer": "ok"},
    }


@pytest.mark.django_db
def test_readyz_names_an_unapplied_migration(client: Client) -> None:
    recorder = MigrationRecorder(connection)
    app, name = max(key for key in recorder.applied_migrations() if key[0] == "scheduling")
    recorder.record_unapplied(app, name)  # rolled back with the test

    response = client.get("/readyz")

    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable" and body["failed"] == ["migrations"]
    assert body["checks"]["migrations"] == f"1 unapplied, first scheduling.{name}"


@pytest.mark.django_db
def test_readyz_is_degraded_not_unready_without_the_channel_layers_redis(client: Client) -> None:
    unreachable = layer_settings("redis")
    unreachable["default"]["CONFIG"]["hosts"] = [
        {"address": f"redis://127.0.0.1:{free_port()}/0"}  # nothing listens
    ]
    with override_settings(CHANNEL_LAYERS=unreachable):
        response = client.get("/readyz")
    assert response.status_code == 200  # pages and the API still work; live updates resume
    assert response.json()["status"] == "degraded"
    assert response.json()["failed"] == ["channel_layer"]
    assert response.json()["checks"]["channel_layer"] == "unavailable (ConnectionError)"

    if not redis_available():
        pytest.skip(f"no Redis at {REDIS_URL}")
    with override_settings(CHANNEL_LAYERS=layer_settings("redis")):
        assert client.get("/readyz").status_code == 200


def test_the_operations_doc_says_what_readyz_answers_without_redis() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "operations.md").read_text()
    probes = doc[doc.index("**Probes.**") :].split("\n\n")[0]
    assert "**200**" in probes and '"status": "degraded"' in probes
    assert '"failed": ["channel_layer"]' in probes


@pytest.mark.django_db
def test_readyz_fails_when_the_web_extender_cannot_be_built(
    client: Client, settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kube import extender

    profile = tmp_path / "profile.yaml"
    profile.write_text(
        "profiles:\n- schedulerName: x\n  plugins: {filter: {enabled: [{nam: A}]}}\n"
    )
    monkeypatch.setenv("GPUSCHED_PROFILE", str(profile))
    settings.WEB_EXTENDER = True
    extender.install(None)
    try:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert response.json()["failed"] == ["extender"]
        assert "unknown key 'nam'" in response.json()["checks"]["extender"]
        # ... and kube-scheduler's calls get that reason with a 503, never a 500.
        token = tmp_path / "token"
        token.write_text("t\n")
        settings.EXTENDER_TOKEN_FILE = str(token)
        answer = client.post(
            "/extender/filter",
            "{}",
            content_type="application/json",
            headers={"Authorization": "Bearer t"},
        )
        assert answer.status_code == 503 and "unknown key 'nam'" in answer.json()["Error"]
    finally:
        extender.install(None)


READYZ_IN_A_FRESH_PROCESS = """
import json, django
django.setup()
from django.test import Client
from django.test.utils import setup_test_environment
setup_test_environment()
ready = Client().get("/readyz")
metrics = Client().get("/metrics")
print(json.dumps({
    "status": ready.status_code,
    "body": ready.json(),
    "metrics_status": metrics.status_code,
    "metrics": metrics.content.decode(),
}))
"""


@pytest.mark.parametrize(
    ("database", "failed"),
    [
        ("sqlite:///{tmp}/empty.sqlite3", ["migrations"]),  # never migrated
        ("postgres://postgres@127.0.0.1:{closed}/gpusched", ["database"]),  # nothing listens
    ],
)
def test_readyz_and_metrics_without_a_migrated_database(
    tmp_path: Path, database: str, failed: list[str]
) -> None:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "gpusched.settings",
        "DATABASE_URL": database.format(tmp=tmp_path, closed=free_port()),
        "GPUSCHED_SECRET_KEY": "test-only",
        "GPUSCHED_LOG_LEVEL": "ERROR",
    }
    env.pop("REDIS_URL", None)
    result = subprocess.run(
        [sys.executable, "-c", READYZ_IN_A_FRESH_PROCESS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    assert answer["status"] == 503
    assert answer["body"]["failed"] == failed
    # /metrics still answers, with the process families and the database reported down.
    assert answer["metrics_status"] == 200
    series = parse(answer["metrics"])
    assert value(series, "gpusched_database_up") == 0
    assert value(series, "gpusched_pods", phase="Pending") is None
    assert value(series, "process_cpu_seconds_total") is not None


# --- JSON logs ---------------------------------------------------------------------------------


def test_json_log_lines_carry_the_extra_fields_and_the_exception() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("tests.observability.json")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("bound %d pods", 3, extra={"bound": 3, "node": "n1", "when": timezone.now()})
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            logger.exception("cycle failed")
    finally:
        logger.removeHandler(handler)

    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first["message"] == "bound 3 pods" and first["level"] == "WARNING"
    assert first["logger"] == "tests.observability.json" and first["process"] == os.getpid()
    assert (first["bound"], first["node"]) == (3, "n1")
    assert isinstance(first["when"], str) and first["ts"].endswith("+00:00")
    assert "args" not in first and "msg" not in first  # only the extra fields are added
    assert second["level"] == "ERROR" and "RuntimeError: boom" in second["exc"]
