"""The ingesttelemetry worker: its cycle steps called directly, and the command around them."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from bench.experiments.worlds import SimClock as Clock
from dashboard.selectors import cluster as cluster_docs
from scheduling import services as node_services
from scheduling.services import ReconcileResult, assignments_reconcile
from telemetry import holders, metrics, selectors
from telemetry.management.commands import ingesttelemetry
from telemetry.management.commands.ingesttelemetry import Command
from telemetry.models import GpuLatest, NodeTelemetry, SourceStatus
from telemetry.placement import NODE_CAP, NODE_UNKNOWN
from telemetry.sources import Fetched, PrometheusSource, ScrapeSource, TelemetrySource
from tests.builders import make_node
from tests.telemetry.conftest import OPERATOR_STATES, PrometheusSetup
from tests.telemetry.servers import FakeExporter, FaultyProxy, closed_port_url

# The upserts and rollups are hand-written SQL (ON CONFLICT, window functions) that must behave
# the same on PostgreSQL: the module runs again in the PostgreSQL pass.
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


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
    """On PostgreSQL (the PostgreSQL pass runs this file there too), one GPU index
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
        assert time.monotonic() - started < 2.0  # no retries with back-off
        assert not report.ok and "Connection refused" in report.errors[0]
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
        assert time.monotonic() - started < 1.5  # --timeout + 1 s
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


def test_a_cycle_against_a_slow_exporter_without_length_ends_by_timeout_plus_one_second(
    exporter: FakeExporter,
) -> None:
    """The command as run, --timeout 0.5: an exporter that sends its body a byte every 50 ms
    with no Content-Length (minutes to read) costs the cycle the timeout, not the body."""
    exporter.drip, exporter.drip_body, exporter.no_length = 0.05, True, True
    out = StringIO()
    started = time.monotonic()
    with pytest.raises(CommandError, match="no telemetry"):
        call_command("ingesttelemetry", "--targets", exporter.url, "--timeout", "0.5", stdout=out)
    assert time.monotonic() - started <= 0.5 + 1.0
    assert "timed out after 0.5 s" in out.getvalue()


def test_a_cycle_against_a_slow_prometheus_ends_by_timeout_plus_one_second(
    prometheus: PrometheusSetup,
) -> None:
    with FaultyProxy(prometheus.url) as proxy:
        proxy.mode = "drip"  # answers at once, then a byte every 50 ms without Content-Length
        out = StringIO()
        started = time.monotonic()
        with pytest.raises(CommandError, match="no telemetry"):
            call_command(
                "ingesttelemetry",
                "--source",
                "prometheus",
                "--prometheus-url",
                proxy.base_url,
                "--timeout",
                "0.5",
                stdout=out,
            )
        assert time.monotonic() - started <= 0.5 + 1.0
    assert "timed out after 0.5 s" in out.getvalue()


@override_settings(TELEMETRY_MAX_NODES_PER_SOURCE=2, TELEMETRY_MAX_SERIES_PER_SOURCE=9)
def test_what_the_caps_leave_out_is_reported_everywhere(exporter: FakeExporter) -> None:
    """In the cycle's report and log line, the ingester's /metrics, and the dashboard's sources."""
    exporter.body = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="node-{n}"}} 5\n'
        for n in range(4)
        for g in range(3)
    )  # 12 series on 4 nodes
    skipped = {"reason": NODE_CAP}
    before = metrics.registry.get_sample_value("gpusched_telemetry_samples_skipped_total", skipped)
    out = StringIO()
    cmd = Command(stdout=out, stderr=StringIO())
    cmd.source = ingesttelemetry.build_source({"targets": exporter.url})
    report = cmd.run_once()
    metrics.record_cycle(report)
    assert report.ok and report.nodes == 2 and report.gpus == 6
    assert report.left_out == [
        "3 exposition lines past the series cap",
        "3 samples of nodes past the node cap",
    ]
    assert "left out: 3 exposition lines past the series cap" in report.line()
    after = metrics.registry.get_sample_value("gpusched_telemetry_samples_skipped_total", skipped)
    assert (after or 0) - (before or 0) == 3
    assert cluster_docs.telemetry_sources()["scrape"]["warning"] == "; ".join(report.left_out)


def test_a_hostname_naming_no_node_of_the_cluster_invents_none(exporter: FakeExporter) -> None:
    """The exporter's pod name in Hostname: with the cluster's nodes known, its GPUs are placed
    on the scrape target's node when that is one, and nowhere when not (counted and shown)."""
    node_services.node_register(spec=make_node("127.0.0.1").gpus(2).build(), source="simulator")
    pod_name = "nvidia-dcgm-exporter-x7k2p"
    exporter.states = [replace(state, hostname=pod_name) for state in OPERATOR_STATES]
    report = command(ScrapeSource([exporter.url])).run_once()
    assert report.ok and report.nodes == 1 and report.nodes_by_rule == {"scrape target": 2}
    assert set(GpuLatest.objects.values_list("node", flat=True)) == {"127.0.0.1"}

    node_services.node_register(spec=make_node("gpu-a").gpus(2).build(), source="simulator")
    source = ScrapeSource([exporter.url.replace("127.0.0.1", "localhost")])
    report = command(source).run_once()
    assert report.gpus == 0 and report.samples_skipped_reasons == {NODE_UNKNOWN: 20}
    assert report.left_out == [
        "series naming no node of the cluster (e.g. nvidia-dcgm-exporter-x7k2p)"
    ]


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

    def fetch(self, known_nodes: frozenset[str] | None = None) -> Fetched:
        self.calls += 1
        signal.raise_signal(signal.SIGTERM)
        return self.inner.fetch(known_nodes)


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


def test_the_holders_check_is_the_one_the_settings_name() -> None:
    assert holders.holders_check() is assignments_reconcile
    with override_settings(TELEMETRY_HOLDERS_CHECK=""):
        assert holders.holders_check() is None  # telemetry alone: the ingester only stores


def test_each_stored_batch_goes_to_the_holders_check(exporter: FakeExporter, monkeypatch) -> None:
    batches: list[dict[tuple[str, str, str], tuple[int, ...]]] = []

    def check(observed):
        batches.append(dict(observed))
        return ReconcileResult()

    monkeypatch.setattr(ingesttelemetry, "holders_check", lambda: check)
    report = command(ScrapeSource([exporter.url])).run_once()
    assert report.ok and len(batches) == 1 and report.assignment_mismatches == 0

    monkeypatch.setattr(ingesttelemetry, "holders_check", lambda: None)
    assert command(ScrapeSource([exporter.url])).run_once().ok and len(batches) == 1
