"""Prometheus goes down under the telemetry ingester: scheduling goes on by requests, and everyone
who looks is told the measurements are stale."""

from __future__ import annotations

import asyncio
import contextlib
import json
import zlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from api import services as api_services
from dashboard.frames import join
from dashboard.live import apply
from scheduling import services
from scheduling.core.plugins.load_aware import NEUTRAL_SCORE
from scheduling.core.profiles import load_profiles
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources, ServiceClass
from scheduling.models import PlacementDecision, Pod
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import PROFILE_DIR
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from scheduling.worker.load_feed import LoadFeed
from telemetry.exposition import GpuState
from telemetry.models import NodeTelemetry, SourceStatus
from telemetry.selectors import gpu_loads
from tests.dashboard.servers import database_url, web_server
from tests.faults import fast_telemetry_settings
from tests.faults.dbtool import placement_problems
from tests.faults.servers import Api, manage, stop, tail, wait_for
from tests.scheduling import factories
from tests.support.accounts import make_admin, session_cookie
from tests.telemetry.servers import FakeExporter, PrometheusServer

pytestmark = [pytest.mark.django_db(transaction=True)]

FAST_SETTINGS = "tests.faults.fast_telemetry_settings"
FRESHNESS_S = int(fast_telemetry_settings.TELEMETRY_FRESHNESS_SECONDS)  # stale after 4 s


def states(nodes: list[str]) -> list[GpuState]:
    """The first node's GPUs 90% busy, the second's 10%."""
    return [
        GpuState(
            hostname=node,
            gpu=index,
            uuid=f"GPU-{zlib.crc32(node.encode()):08x}-{index:04d}-4c5d-8e9f-0a1b2c3d4e5f",
            gpu_util=busy,
            gr_engine_active=busy / 100,
        )
        for node, busy in zip(nodes, (90.0, 10.0), strict=True)
        for index in range(8)
    ]


def worker() -> SchedulingCycle:
    """The shipped gpusched profile; measured load re-read every cycle (the freshness window, 4 s
    here, is the test's TELEMETRY_FRESHNESS_SECONDS, the same for telemetry and LoadAware)."""
    profile = load_profiles((PROFILE_DIR / "gpusched.yaml").read_text())[0]
    return database_cycle(
        Framework(profile), identity="faults", load_feed=LoadFeed(refresh_every_s=0.0)
    )


def place(scheduler: SchedulingCycle, name: str) -> list[dict[str, Any]]:
    """Submit an online workload of two 1-GPU pods, run one cycle: its decisions' explanations
    for the chosen nodes."""
    template = PodTemplate(resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=1))
    services.workload_submit(
        tenant=factories.tenant(),
        name=name,
        service_class=ServiceClass.ONLINE,
        pod_sets=[services.PodSetSpec(name="main", count=2, template=template)],
    )
    scheduler.run_once()
    pods = Pod.objects.filter(workload__name=name)
    assert {pod.phase for pod in pods} == {"Bound"}, [(p.name, p.last_reason) for p in pods]
    return [d.explanation["chosen"] for d in PlacementDecision.objects.filter(pod__in=pods)]


def cluster_state(base: str, cookie: bytes, wanted: str) -> dict[str, Any]:
    """The Cluster view's state as a browser builds it: the snapshot, then the sampled slices
    that follow it, until slice `wanted` is there."""

    async def receive() -> dict[str, Any]:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(
                f"{base.replace('http', 'ws')}/ws/live/cluster/",
                headers={"Cookie": cookie.decode(), "Origin": base},
            ) as ws,
        ):
            state: dict[str, Any] = {}
            while wanted not in state:
                texts = [await ws.receive_str(timeout=15)]
                while len(texts) < json.loads(texts[0]).get("parts", 1):
                    texts.append(await ws.receive_str(timeout=15))
                (message,) = join(texts)
                if message["type"] == "snapshot":
                    state = message["state"]
                else:
                    apply(state, message["changes"])
            return state

    return asyncio.run(receive())


@pytest.mark.slow
def test_prometheus_down_ingest_survives_scheduling_goes_on_and_staleness_shows(
    tmp_path: Path, settings: Any
) -> None:
    """Fault: the Prometheus that `ingesttelemetry --loop --source prometheus` reads is killed
    (SIGKILL) and stays down.

    Expected: the ingester keeps running and records every failed cycle (SourceStatus:
    consecutive failures, last error) and, past the freshness window, marks the nodes stale;
    the scheduler keeps placing pods by their requests: LoadAware, which steered placement by
    measured load while Prometheus was up, scores every node a neutral 50 and says why
    ("GPU metrics stale"), in the decision the API returns; the dashboard's Cluster view reports
    each node's telemetry as "stale"."""
    if PrometheusServer.binary() is None:
        pytest.skip("no prometheus binary (scripts/test.sh installs Debian's prometheus)")
    settings.TELEMETRY_FRESHNESS_SECONDS = FRESHNESS_S  # as the ingester process has it
    nodes = [node.name for node in factories.nodes(2)]
    tenant = factories.tenant()
    _, token = api_services.token_create(tenant=tenant, name="faults")
    cookie = session_cookie(make_admin())
    ingest_log = tmp_path / "ingest.log"
    with contextlib.ExitStack() as stack:
        exporter = stack.enter_context(FakeExporter(states(nodes)))
        target = {"targets": [f"127.0.0.1:{exporter.port}"]}
        prometheus = PrometheusServer(tmp_path, [{"job_name": "dcgm", "static_configs": [target]}])
        stack.callback(prometheus.stop)
        prometheus.launch()
        # The ingester and the web process start while Prometheus does.
        ingest = manage(
            "ingesttelemetry", "--loop", "--source", "prometheus",
            "--prometheus-url", prometheus.url, "--interval", "0.5", "--timeout", "0.5",
            "--json", database_url=database_url(), log=ingest_log,
            DJANGO_SETTINGS_MODULE=FAST_SETTINGS,
        )  # fmt: skip
        stack.callback(stop, ingest)
        base = stack.enter_context(
            web_server(environment={"DJANGO_SETTINGS_MODULE": FAST_SETTINGS})
        )
        prometheus.wait_ready()

        def ingested() -> bool:
            status = SourceStatus.objects.filter(name="prometheus").first()
            return status is not None and status.last_gpus == 16 and not status.consecutive_failures

        wait_for(ingested, timeout=30)  # Prometheus's first scrapes come 5-6 s after its start
        scheduler = worker()
        # Readings well inside the window (scraped every second, ingested every 0.5 s).
        wait_for(lambda: max(load.age_seconds for load in gpu_loads().values()) < 2, timeout=10)

        # Up: measured load steers the online pods to the idle node.
        fresh = place(scheduler, "while-up")
        assert {chosen["node"] for chosen in fresh} == {nodes[1]}
        assert all("LoadAware" not in chosen["notes"] for chosen in fresh)
        assert all(chosen["scores"]["LoadAware"] != NEUTRAL_SCORE for chosen in fresh)

        assert prometheus.process is not None
        prometheus.process.kill()
        prometheus.process.wait()
        prometheus.process = None

        def failing() -> bool:
            status = SourceStatus.objects.get(name="prometheus")
            return status.consecutive_failures >= 3 and bool(status.last_error)

        wait_for(failing, timeout=15)
        wait_for(
            lambda: set(NodeTelemetry.objects.values_list("state", flat=True)) == {"stale"},
            timeout=15,
        )
        assert ingest.poll() is None, f"ingesttelemetry died:\n{tail(ingest_log)}"

        # Down and stale: still placed, by requests; LoadAware neutral and saying why.
        stale = place(scheduler, "while-down")
        for chosen in stale:
            assert chosen["scores"]["LoadAware"] == NEUTRAL_SCORE
            assert "GPU metrics stale" in chosen["notes"]["LoadAware"], chosen["notes"]
        assert placement_problems() == []

        # Both show it: the API's decision, the dashboard's Cluster view.
        status, body = Api(base, token).get("/api/v1/workloads/while-down/placements")
        assert status == 200, body
        notes = [item["explanation"]["chosen"]["notes"] for item in body["items"]]
        assert len(notes) == 2 and all("stale" in n["LoadAware"] for n in notes), notes
        telemetry = cluster_state(base, cookie, "telemetry")["telemetry"]
        assert {telemetry[node]["state"] for node in nodes} == {"stale"}, telemetry

        assert ingest.poll() is None, f"ingesttelemetry died:\n{tail(ingest_log)}"
        lines = ingest_log.read_text().splitlines()
        cycles = [json.loads(line) for line in lines if line.startswith("{")]
        assert any(cycle["ok"] for cycle in cycles)
        assert not cycles[-1]["ok"] and cycles[-1]["errors"]
