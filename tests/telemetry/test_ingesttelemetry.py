"""The ingesttelemetry worker: its cycle steps called directly, and the command around them."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from datetime import datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from bench.experiments.worlds import SimClock as Clock
from telemetry import selectors
from telemetry.management.commands import ingesttelemetry
from telemetry.management.commands.ingesttelemetry import Command
from telemetry.models import GpuLatest, NodeTelemetry, SourceStatus
from telemetry.sources import Fetched, PrometheusSource, ScrapeSource, TelemetrySource
from tests.telemetry.conftest import PrometheusSetup
from tests.telemetry.servers import FakeExporter, FaultyProxy, closed_port_url

pytestmark = pytest.mark.django_db


def command(source: TelemetrySource, clock: Callable[[], datetime] | None = None) -> Command:
    cmd = Command(stdout=StringIO(), stderr=StringIO())
    cmd.source = source
    if clock is not None:
        cmd.clock = clock
    return cmd


def test_run_once_ingests_a_scrape(exporter: FakeExporter) -> None:
    clock = Clock(timezone.now())
    cmd = command(ScrapeSource([exporter.url]), clock)

    report = cmd.run_once()

    assert report.ok and report.errors == []
    assert (report.gpus, report.nodes, report.samples, report.skipped) == (2, 1, 20, 0)
    assert report.source == "scrape" and report.total_s < 5
    assert GpuLatest.objects.count() == 2
    assert NodeTelemetry.objects.get().state == "fresh"
    status = SourceStatus.objects.get(name="scrape")
    assert status.last_success_at == clock.now and status.last_gpus == 2


def test_malformed_lines_are_reported_not_fatal(exporter: FakeExporter) -> None:
    exporter.body = exporter.text() + 'DCGM_FI_DEV_GPU_UTIL{gpu="9" 1\n'
    report = command(ScrapeSource([exporter.url])).run_once()
    assert report.ok and report.skipped == 1
    assert report.skipped_reasons == {"invalid labels": 1}


BAD_SERIES = [
    # (labels, metric, value, the reason it is counted under)
    ('gpu="40000",Hostname="node-x"', "DCGM_FI_DEV_GPU_UTIL", "50", "gpu index out of range"),
    (f'gpu="0",Hostname="{"n" * 300}"', "DCGM_FI_DEV_GPU_UTIL", "50", "label too long: node"),
    ('gpu="-1",Hostname="node-x"', "DCGM_FI_DEV_GPU_UTIL", "50", "gpu label not an index"),
    ('gpu="abc",Hostname="node-x"', "DCGM_FI_DEV_GPU_UTIL", "50", "gpu label not an index"),
    ('gpu="",Hostname="node-x"', "DCGM_FI_DEV_GPU_UTIL", "50", "no gpu label"),
    (
        'gpu="7",Hostname="node-x"',
        "DCGM_FI_DEV_GPU_UTIL",
        "500",
        "value out of range: DCGM_FI_DEV_GPU_UTIL",
    ),
    (
        'gpu="7",Hostname="node-x"',
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "-5",
        "value out of range: DCGM_FI_DEV_MEM_COPY_UTIL",
    ),
    ('gpu="7",Hostname="node-x"', "DCGM_FI_DEV_POWER_USAGE", "-Inf", "value not finite"),
]


def test_bad_series_are_skipped_and_counted_never_the_cycle(exporter: FakeExporter) -> None:
    """On PostgreSQL (tests/telemetry/test_postgres.py runs this file there too), one GPU index
    over a smallint or one label over its column failed the whole batch: nothing was stored."""
    lines = [f"{metric}{{{labels}}} {value}" for labels, metric, value, _ in BAD_SERIES]
    lines.append('DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="7",Hostname="node-x"} 1.01')  # noise
    exporter.body = exporter.text() + "\n".join(lines) + "\n"
    cmd = command(ScrapeSource([exporter.url]))
    for _ in range(3):  # the loop's cycles, each one whole
        report = cmd.run_once()
        assert report.ok and report.gpus == 3  # the exporter's two, and node-x's GPU 7
    expected: dict[str, int] = {}
    for *_, reason in BAD_SERIES:
        expected[reason] = expected.get(reason, 0) + 1
    assert report.samples_skipped_reasons == expected
    assert report.samples_skipped == len(BAD_SERIES)
    assert report.values_clamped == {"DCGM_FI_PROF_GR_ENGINE_ACTIVE": 1}
    kept = GpuLatest.objects.get(node="node-x")
    assert kept.gpu_index == 7 and kept.gr_engine_active == 1.0  # clamped, not 1.01
    assert kept.gpu_util is None and kept.mem_copy_util is None and kept.power_w is None
    assert GpuLatest.objects.count() == 3


@override_settings(TELEMETRY_FRESHNESS_SECONDS=30)
def test_exporter_down_keeps_the_data_marks_stale_and_recovers(exporter: FakeExporter) -> None:
    clock = Clock(timezone.now())
    cmd = command(ScrapeSource([exporter.url], timeout=0.5), clock)
    assert cmd.run_once().ok

    exporter.stop()
    clock.advance(31)
    started = time.monotonic()
    report = cmd.run_once()
    assert time.monotonic() - started < 2.0
    assert not report.ok and report.stale_marked == 1
    assert "Connection refused" in report.errors[0]
    assert GpuLatest.objects.count() == 2  # the last values stay, with their age
    assert all(load.stale for load in selectors.gpu_loads(now=clock.now).values())

    exporter.start()  # the same port again
    clock.advance(15)
    assert cmd.run_once().ok
    assert NodeTelemetry.objects.get().state == "fresh"
    assert not any(load.stale for load in selectors.gpu_loads(now=clock.now).values())
    assert (cmd.cycles, cmd.failures) == (3, 1)


@override_settings(TELEMETRY_FRESHNESS_SECONDS=30)
def test_prometheus_down_or_slow_never_stalls_the_ingester(prometheus: PrometheusSetup) -> None:
    """Interval 15 s, freshness window 30 s, request timeout 0.5 s."""
    clock = Clock(timezone.now())
    with FaultyProxy(prometheus.url) as proxy:
        cmd = command(PrometheusSource(proxy.base_url, timeout=0.5), clock)

        # 1. Prometheus up: every exporter's GPUs, fresh.
        report = cmd.run_once()
        assert report.ok and report.nodes == 3 and report.gpus == 9
        assert {s.state for s in selectors.node_freshness(now=clock.now).values()} == {"fresh"}

        # 2. Prometheus down (connection refused): fails at once, data kept, still fresh.
        proxy.stop()
        clock.advance(15)
        started = time.monotonic()
        report = cmd.run_once()
        assert time.monotonic() - started < 2.0  # not the client's ~6 s of retries
        assert not report.ok and "ConnectionError" in report.errors[0]
        assert GpuLatest.objects.count() == 9
        assert NodeTelemetry.objects.filter(state="stale").count() == 0

        # 3. Still down one interval later: past the window, every node is marked stale.
        clock.advance(16)
        report = cmd.run_once()
        assert report.stale_marked == 3
        assert set(NodeTelemetry.objects.values_list("state", flat=True)) == {"stale"}
        assert all(load.stale for load in selectors.gpu_loads(now=clock.now).values())

        # 4. Up again but hanging: the cycle costs the timeout, no more.
        proxy.mode = "slow"
        proxy.start()
        clock.advance(15)
        started = time.monotonic()
        report = cmd.run_once()
        assert time.monotonic() - started < 2.5
        assert not report.ok and "timed out" in report.errors[0]
        status = SourceStatus.objects.get(name="prometheus")
        assert (status.consecutive_failures, status.failures_total) == (3, 3)

        # 5. Answering again: the same worker recovers by itself.
        proxy.mode = "up"
        clock.advance(15)
        report = cmd.run_once()
        assert report.ok and report.gpus == 9
        assert set(NodeTelemetry.objects.values_list("state", flat=True)) == {"fresh"}
        assert SourceStatus.objects.get(name="prometheus").consecutive_failures == 0
        assert not selectors.gpu_loads(now=clock.now)[("prom-a", 0)].stale


def test_prometheus_on_a_closed_port_costs_less_than_the_timeout() -> None:
    cmd = command(PrometheusSource(closed_port_url(), timeout=2))
    started = time.monotonic()
    report = cmd.run_once()
    assert time.monotonic() - started < 1.5
    assert not report.ok and len(report.errors) == 1
    assert SourceStatus.objects.get(name="prometheus").failures_total == 1


def test_once_prints_one_json_line(exporter: FakeExporter) -> None:
    out = StringIO()
    call_command("ingesttelemetry", "--once", "--targets", exporter.url, "--json", stdout=out)
    (line,) = out.getvalue().splitlines()
    report = json.loads(line)
    assert report["ok"] and report["gpus"] == 2 and report["source"] == "scrape"
    assert set(report) >= {"at", "samples", "skipped", "errors", "stale_marked", "total_s"}


def test_the_default_output_is_one_human_line(exporter: FakeExporter) -> None:
    out = StringIO()
    call_command("ingesttelemetry", "--targets", exporter.url, stdout=out)
    assert out.getvalue().startswith("ingesttelemetry scrape ok: 2 GPUs on 1 nodes")


def test_once_fails_when_the_cycle_got_nothing() -> None:
    out = StringIO()
    with pytest.raises(CommandError, match="no telemetry"):
        call_command("ingesttelemetry", "--targets", closed_port_url() + "/metrics", stdout=out)
    assert "FAILED" in out.getvalue() and "error:" in out.getvalue()


def test_prometheus_is_selected_by_flag() -> None:
    source = ingesttelemetry.build_source(
        {"source": "prometheus", "prometheus_url": "http://prom:9090", "timeout": 1.5}
    )
    assert isinstance(source, PrometheusSource)
    assert (source.url, source.timeout) == ("http://prom:9090", 1.5)
    source = ingesttelemetry.build_source({"targets": "http://a/metrics, http://b/metrics"})
    assert isinstance(source, ScrapeSource) and source.targets == [
        "http://a/metrics",
        "http://b/metrics",
    ]


class _TermOnFetch:
    """A source that sends this process SIGTERM while fetching, as `kill` would."""

    name = "scrape"

    def __init__(self, inner: TelemetrySource) -> None:
        self.inner = inner
        self.calls = 0

    def fetch(self) -> Fetched:
        self.calls += 1
        signal.raise_signal(signal.SIGTERM)
        return self.inner.fetch()


def test_sigterm_finishes_the_cycle_and_stops_the_loop(
    exporter: FakeExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _TermOnFetch(ScrapeSource([exporter.url]))
    monkeypatch.setattr(ingesttelemetry, "build_source", lambda options: source)
    before = signal.getsignal(signal.SIGTERM)
    out = StringIO()

    started = time.monotonic()
    call_command("ingesttelemetry", "--loop", "--interval", "30", "--json", stdout=out)

    assert time.monotonic() - started < 5  # did not wait for the next interval
    assert source.calls == 1
    assert json.loads(out.getvalue())["ok"]  # the cycle in progress completed
    assert signal.getsignal(signal.SIGTERM) is before
