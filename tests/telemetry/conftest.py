"""Fixtures for the telemetry tests: GPU states, exporters, and a real Prometheus scraping them.

The Prometheus (Debian package `prometheus`, installed by scripts/test.sh) runs once per test
process, from a generated config, scraping three exporters every second, one per label variant:

    dcgm-plain     releases' labels: Hostname, UUID, pod/namespace/container; a MIG GPU, an idle GPU
    dcgm-operator  master's `hostname`, scraped as prometheus-operator does: target labels
                   namespace/pod/container/service/endpoint, honor_labels false, so Prometheus
                   renames the exporter's pod labels exported_pod/exported_namespace/...
    dcgm-old       --use-old-namespace: uuid, pod_name/pod_namespace/container_name; a pre-Volta
                   GPU without PROF_* fields; 2.x-era empty pod labels on the idle GPU
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlencode

import pytest
from django.db import connection

from telemetry.exposition import ExporterFlavor, GpuState
from tests.telemetry.servers import FakeExporter, PrometheusServer, http_get, wait_for

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
T4 = "Tesla T4"


def gpu(hostname: str, index: int, **fields: Any) -> GpuState:
    return GpuState(
        hostname=hostname,
        gpu=index,
        uuid=f"GPU-{zlib.crc32(hostname.encode()):08x}-{index:04d}-4c5d-8e9f-0a1b2c3d4e5f",
        **fields,
    )


def plain_states(scrape: int) -> list[GpuState]:
    """node prom-a: a training pod, an idle GPU, a GPU alternating 10% / 90% busy, two MIG
    instances (no GPU_UTIL on MIG)."""
    host = "prom-a"
    swing = 90.0 if scrape % 2 else 10.0
    return [
        gpu(host, 0, model_name=H100, gpu_util=87, gr_engine_active=0.81, fb_used_mib=61234,
            fb_free_mib=20325, namespace="ml-team", pod="llama-ft-0", container="trainer"),
        gpu(host, 1, model_name=H100, gpu_util=0, gr_engine_active=0.0, fb_used_mib=0),
        gpu(host, 2, model_name=H100, gpu_util=swing, gr_engine_active=None, fb_used_mib=1000,
            namespace="ml-team", pod="swing-0", container="main"),
        gpu(host, 3, model_name=A100, gpu_util=None, mem_copy_util=None, gr_engine_active=0.5,
            fb_used_mib=5000, mig_profile="1g.10gb", mig_instance=9, namespace="serving",
            pod="tts-predictor-5554f75554-8j8pl", container="kserve-container"),
        gpu(host, 3, model_name=A100, gpu_util=None, mem_copy_util=None, gr_engine_active=0.25,
            fb_used_mib=3000, mig_profile="1g.10gb", mig_instance=10),
    ]  # fmt: skip


OPERATOR_STATES = [
    gpu("prom-b", 0, gpu_util=64, gr_engine_active=0.6, fb_used_mib=30000, namespace="serving",
        pod="tts-predictor-0", container="kserve-container"),
    gpu("prom-b", 1, gpu_util=0, gr_engine_active=0.0, fb_used_mib=0),
]  # fmt: skip

OLD_STATES = [
    gpu("prom-c", 0, model_name=T4, gpu_util=42, gr_engine_active=None, tensor_active=None,
        dram_active=None, fb_used_mib=9000, namespace="research", pod="bert-0", container="bert"),
    gpu("prom-c", 1, model_name=T4, gpu_util=0, gr_engine_active=None, tensor_active=None,
        dram_active=None, fb_used_mib=0),
]  # fmt: skip

OPERATOR_TARGET_LABELS = {
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-x7k2p",
    "container": "nvidia-dcgm-exporter",
    "service": "nvidia-dcgm-exporter",
    "endpoint": "gpu-metrics",
}


@dataclass
class PrometheusSetup:
    server: PrometheusServer
    exporters: dict[str, FakeExporter]

    @property
    def url(self) -> str:
        return self.server.url


@pytest.fixture(scope="session", autouse=True)
def _prometheus_launch(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[PrometheusSetup | None]:
    """Launch Prometheus with the first telemetry test, so its start overlaps other tests."""
    if (
        not PrometheusServer.binary()
        # The PostgreSQL pass reruns the database's part; what Prometheus answers does not
        # depend on it, and the SQLite pass has checked that.
        or connection.vendor == "postgresql"
    ):
        yield None
        return
    old_flavor = ExporterFlavor(old_namespace=True, empty_pod_labels=True, driver_version=None)
    exporters = {
        "dcgm-plain": FakeExporter(plain_states).start(),
        "dcgm-operator": FakeExporter(
            OPERATOR_STATES, flavor=ExporterFlavor(hostname_label="hostname")
        ).start(),
        "dcgm-old": FakeExporter(OLD_STATES, flavor=old_flavor).start(),
    }
    scrape_configs: list[dict[str, Any]] = []
    for job, exporter in exporters.items():
        target: dict[str, Any] = {"targets": [f"127.0.0.1:{exporter.port}"]}
        if job == "dcgm-operator":
            target["labels"] = OPERATOR_TARGET_LABELS
        scrape_configs.append({"job_name": job, "honor_labels": False, "static_configs": [target]})
    server = PrometheusServer(tmp_path_factory.mktemp("prometheus"), scrape_configs)
    try:
        yield PrometheusSetup(server.launch(), exporters)
    finally:
        server.stop()
        for exporter in exporters.values():
            exporter.stop()


@pytest.fixture(scope="session")
def prometheus(_prometheus_launch: PrometheusSetup | None) -> PrometheusSetup:
    """A real Prometheus scraping the three exporters, with a few scrapes of data already.

    Prometheus hands new targets to its scrapers at most every 5 s, so the first data comes
    5-6 s after the start.
    """
    if _prometheus_launch is None:
        pytest.skip("no prometheus binary (scripts/test.sh installs it), or the PostgreSQL pass")
    server = _prometheus_launch.server
    server.wait_ready()
    # Every job scraped at least 3 times (p95 needs a few points).
    query = "min(count_over_time(up[1m])) >= 3 and min(up) == 1 and count(up) == 3"
    wait_for(lambda: _vector(server.url, query), timeout=30)
    return _prometheus_launch


def _vector(url: str, query: str) -> list[Any]:
    status, body = http_get(f"{url}/api/v1/query?{urlencode({'query': query})}")
    assert status == 200
    result: list[Any] = json.loads(body)["data"]["result"]
    return result


@pytest.fixture
def exporter() -> Iterator[FakeExporter]:
    with FakeExporter([replace(state) for state in OPERATOR_STATES]) as server:
        yield server
