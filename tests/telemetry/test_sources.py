"""Sources: direct scrape of exporters, and a real Prometheus read through its HTTP API."""

from __future__ import annotations

import time
from collections.abc import Iterable

import pytest
from prometheus_api_client import PrometheusConnect

from telemetry.bounded_http import BoundedSession
from telemetry.dcgm import GpuKey, GpuSample, PodRef
from telemetry.exposition import ExporterFlavor
from telemetry.parsing import SERIES_CAP
from telemetry.placement import NODE_CAP
from telemetry.sources import Limits, PrometheusSource, ScrapeSource, SourceError
from tests.telemetry.conftest import OPERATOR_STATES, PrometheusSetup, gpu
from tests.telemetry.servers import FakeExporter, FaultyProxy, closed_port_url


def by_key(gpus: Iterable[GpuSample]) -> dict[tuple[GpuKey, PodRef | None], GpuSample]:
    return {(sample.key, sample.pod): sample for sample in gpus}


def only(gpus: Iterable[GpuSample], node: str, index: int, mig: str = "") -> GpuSample:
    found = [sample for sample in gpus if sample.key == GpuKey(node, index, mig)]
    assert len(found) == 1, found
    return found[0]


# --- direct scrape ------------------------------------------------------------------------------


def test_scrape_source_reads_an_exporter(exporter: FakeExporter) -> None:
    fetched = ScrapeSource([exporter.url], timeout=2).fetch()

    assert fetched.errors == []
    assert fetched.parse.skipped == 0
    busy = only(fetched.gpus, "prom-b", 0)
    assert busy.pod == PodRef("serving", "tts-predictor-0", "kserve-container")
    assert busy.values["gpu_util"] == pytest.approx(0.64)
    assert busy.values["fb_used_mib"] == 30000
    assert busy.busy == pytest.approx(0.6)
    assert only(fetched.gpus, "prom-b", 1).pod is None


def test_scrape_source_names_the_node_after_the_target_when_no_label_does() -> None:
    text = 'DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1"} 50\n'
    with FakeExporter() as server:
        server.body = text
        fetched = ScrapeSource([server.url]).fetch()
    assert [sample.key for sample in fetched.gpus] == [GpuKey("127.0.0.1", 0, "")]


def test_scrape_source_keeps_the_scrape_when_lines_are_malformed(exporter: FakeExporter) -> None:
    exporter.body = (
        exporter.text()
        + 'DCGM_FI_DEV_GPU_UTIL{gpu="7",Hostname="prom-b" 12\n'
        + 'DCGM_FI_DEV_FB_USED{gpu="7",Hostname="prom-b"} lots\n'
    )
    fetched = ScrapeSource([exporter.url]).fetch()
    assert fetched.parse.skipped == 2
    assert {sample.key.gpu_index for sample in fetched.gpus} == {0, 1}


def test_one_target_down_is_a_partial_failure(exporter: FakeExporter) -> None:
    down = closed_port_url() + "/metrics"
    fetched = ScrapeSource([exporter.url, down], timeout=1).fetch()
    assert len(fetched.gpus) == 2
    assert len(fetched.errors) == 1 and fetched.errors[0].startswith(down)


def test_every_target_down_is_an_error() -> None:
    with pytest.raises(SourceError, match="Connection refused|URLError"):
        ScrapeSource([closed_port_url() + "/metrics"], timeout=1).fetch()


def test_an_http_error_is_the_targets_error(exporter: FakeExporter) -> None:
    exporter.status = 500
    with pytest.raises(SourceError, match="500"):
        ScrapeSource([exporter.url]).fetch()


def test_a_hung_exporter_costs_at_most_the_timeout(exporter: FakeExporter) -> None:
    exporter.delay = 5
    started = time.monotonic()
    with pytest.raises(SourceError, match="timed out"):
        ScrapeSource([exporter.url], timeout=0.3).fetch()
    assert time.monotonic() - started < 2.0


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_the_timeout_is_a_deadline_that_holds_against_a_slow_drip(
    exporter: FakeExporter, phase: str
) -> None:
    """Each byte comes well within the timeout, so only a wall-clock deadline stops it (the
    whole answer would take minutes)."""
    exporter.drip = 0.05
    exporter.drip_body = phase == "body"
    started = time.monotonic()
    with pytest.raises(SourceError, match="timed out after 0.5 s"):
        ScrapeSource([exporter.url], timeout=0.5).fetch()
    assert time.monotonic() - started < 1.5


def test_a_body_without_length_dripped_slowly_is_cut_at_the_deadline(
    exporter: FakeExporter,
) -> None:
    """No Content-Length: the body ends when the server closes, which a drip puts off for
    minutes; the deadline still holds (issue 33: it took 30 s with --timeout 2)."""
    exporter.drip, exporter.drip_body, exporter.no_length = 0.05, True, True
    started = time.monotonic()
    with pytest.raises(SourceError, match="timed out after 0.5 s"):
        ScrapeSource([exporter.url], timeout=0.5).fetch()
    assert time.monotonic() - started < 1.5


def test_the_deadline_covers_every_target_of_a_fetch() -> None:
    """Eight hung exporters and two workers: the fetch ends at its one deadline, not after four
    rounds of the timeout; the targets that could not start by then say so."""
    servers = [FakeExporter(OPERATOR_STATES).start() for _ in range(8)]
    try:
        for server in servers:
            server.delay = 5
        started = time.monotonic()
        with pytest.raises(SourceError, match="timed out"):
            ScrapeSource([s.url for s in servers], timeout=0.5, max_workers=2).fetch()
        assert time.monotonic() - started < 1.5
    finally:
        for server in servers:
            server.stop()


def test_series_past_the_cap_are_not_read_and_are_counted(exporter: FakeExporter) -> None:
    exporter.body = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="{g}",Hostname="node-{n}"}} 5\n'
        for n in range(2_000)
        for g in range(8)
    )
    fetched = ScrapeSource([exporter.url], limits=Limits(max_series=1_000)).fetch()
    assert fetched.parse.samples == 1_000 and len(fetched.gpus) == 1_000
    assert fetched.parse.skipped_reasons == {SERIES_CAP: 15_000}
    assert fetched.capped == ["15000 exposition lines past the series cap"]


def test_nodes_past_the_cap_are_left_out_and_counted(exporter: FakeExporter) -> None:
    """However many nodes the labels name, a source places at most max_nodes of them: a valid
    scrape of 125,016 invented nodes cannot become 125,016 nodes."""
    exporter.body = "".join(
        f'DCGM_FI_DEV_GPU_UTIL{{gpu="0",Hostname="invented-{n}"}} 5\n' for n in range(500)
    )
    fetched = ScrapeSource([exporter.url], limits=Limits(max_nodes=20)).fetch()
    assert len({gpu.key.node for gpu in fetched.gpus}) == 20
    assert fetched.mapping.skipped == {NODE_CAP: 480}
    assert fetched.capped == ["480 samples of nodes past the node cap"]


def test_only_the_clusters_nodes_are_placed(exporter: FakeExporter) -> None:
    fetched = ScrapeSource([exporter.url]).fetch(frozenset({"prom-a"}))
    assert list(fetched.gpus) == [] and fetched.mapping.unknown_nodes == ["prom-b"]
    fetched = ScrapeSource([exporter.url]).fetch(frozenset({"prom-b"}))
    assert {gpu.key.node for gpu in fetched.gpus} == {"prom-b"}


def test_scrape_source_needs_targets() -> None:
    with pytest.raises(ValueError):
        ScrapeSource([])


# --- a real Prometheus --------------------------------------------------------------------------


def test_prometheus_instant_values_in_every_label_variant(prometheus: PrometheusSetup) -> None:
    fetched = PrometheusSource(prometheus.url, timeout=2).fetch()
    gpus = fetched.gpus
    assert fetched.parse.skipped == 0

    # dcgm-plain: releases' labels, kept as they are (no target labels collide).
    trainer = only(gpus, "prom-a", 0)
    assert trainer.pod == PodRef("ml-team", "llama-ft-0", "trainer")
    assert trainer.values["gpu_util"] == pytest.approx(0.87)
    assert trainer.values["gr_engine_active"] == pytest.approx(0.81)
    assert trainer.values["fb_used_mib"] == 61234
    assert trainer.busy == pytest.approx(0.81)  # PROF_GR_ENGINE_ACTIVE wins over GPU_UTIL
    assert trainer.model_name == "NVIDIA H100 80GB HBM3"
    assert trainer.uuid.startswith("GPU-")
    assert only(gpus, "prom-a", 1).pod is None
    # MIG instances: keyed by GPU_I_ID, no GPU_UTIL, busy from PROF_GR_ENGINE_ACTIVE.
    mig = only(gpus, "prom-a", 3, "9")
    assert mig.mig_profile == "1g.10gb"
    assert "gpu_util" not in mig.values
    assert mig.busy == pytest.approx(0.5)
    assert mig.pod == PodRef("serving", "tts-predictor-5554f75554-8j8pl", "kserve-container")
    assert only(gpus, "prom-a", 3, "10").pod is None

    # dcgm-operator: `hostname`, and exported_* pod labels beside the exporter's target labels.
    serving = only(gpus, "prom-b", 0)
    assert serving.pod == PodRef("serving", "tts-predictor-0", "kserve-container")
    assert serving.busy == pytest.approx(0.6)
    assert only(gpus, "prom-b", 1).pod is None  # not the exporter's own pod

    # dcgm-old: uuid, pod_name/pod_namespace/container_name, no PROF_* on a T4.
    bert = only(gpus, "prom-c", 0)
    assert bert.pod == PodRef("research", "bert-0", "bert")
    assert bert.uuid.startswith("GPU-")
    assert "gr_engine_active" not in bert.values
    assert bert.busy == pytest.approx(0.42)  # GPU_UTIL / 100
    assert only(gpus, "prom-c", 1).pod is None  # pod_name="" means no pod


def test_prometheus_matchers_narrow_the_query(prometheus: PrometheusSetup) -> None:
    fetched = PrometheusSource(prometheus.url, matchers='job="dcgm-operator"').fetch()
    assert {sample.key.node for sample in fetched.gpus} == {"prom-b"}
    # Instant-query timestamps are evaluation times: the age starts at the ingest instead.
    assert all(sample.timestamp is None for sample in fetched.gpus)


def test_prometheus_p95_over_a_window(prometheus: PrometheusSetup) -> None:
    source = PrometheusSource(prometheus.url)
    fetched = source.fetch_quantile("DCGM_FI_DEV_GPU_UTIL", window="1m")
    swing = only(fetched.gpus, "prom-a", 2)
    # The GPU alternates 10% and 90% between scrapes: its p95 is near the top.
    assert 0.5 < swing.values["gpu_util"] <= 0.9
    steady = only(fetched.gpus, "prom-a", 0)
    assert steady.values["gpu_util"] == pytest.approx(0.87)

    busy = source.busy_quantile(window="1m")
    assert busy[GpuKey("prom-a", 0, "")] == pytest.approx(0.81)  # the PROF field
    assert 0.5 < busy[GpuKey("prom-a", 2, "")] <= 0.9  # GPU_UTIL where PROF is absent
    assert busy[GpuKey("prom-c", 0, "")] == pytest.approx(0.42)


def test_prometheus_quantile_needs_a_known_field(prometheus: PrometheusSetup) -> None:
    with pytest.raises(ValueError):
        PrometheusSource(prometheus.url).fetch_quantile("up")


def test_prometheus_refusing_connections_fails_at_once_without_retries() -> None:
    source = PrometheusSource(closed_port_url(), timeout=1)
    started = time.monotonic()
    with pytest.raises(SourceError, match="Connection refused"):
        source.fetch()
    assert time.monotonic() - started < 2.0  # a client retrying with back-off sleeps ~6 s


def test_prometheus_503_is_not_retried(prometheus: PrometheusSetup) -> None:
    with FaultyProxy(prometheus.url) as proxy:
        proxy.mode = "error"
        started = time.monotonic()
        with pytest.raises(SourceError, match="503"):
            PrometheusSource(proxy.base_url, timeout=1).fetch()
        assert time.monotonic() - started < 2.0
        assert proxy.hits == 1


def test_a_hung_prometheus_costs_at_most_the_timeout(prometheus: PrometheusSetup) -> None:
    with FaultyProxy(prometheus.url) as proxy:
        proxy.mode = "slow"
        started = time.monotonic()
        with pytest.raises(SourceError, match="timed out"):
            PrometheusSource(proxy.base_url, timeout=0.5).fetch()
        assert time.monotonic() - started < 1.5
        assert proxy.hits == 1


@pytest.mark.parametrize("mode", ["drip", "drip-head", "drip-length"])
def test_a_prometheus_dripping_its_answer_costs_at_most_the_timeout(
    prometheus: PrometheusSetup, mode: str
) -> None:
    """A slow Prometheus sending its JSON a byte at a time: without Content-Length (issue 33:
    36 s with --timeout 2), from its status line on, or with a Content-Length it is slow to
    honour. Each byte comes well within any socket timeout: only a deadline over the whole
    request ends it."""
    with FaultyProxy(prometheus.url) as proxy:
        proxy.mode = mode
        started = time.monotonic()
        with pytest.raises(SourceError, match="timed out after 0.5 s"):
            PrometheusSource(proxy.base_url, timeout=0.5).fetch()
        assert time.monotonic() - started < 1.5


def test_prometheus_is_read_through_prometheus_api_client(prometheus: PrometheusSetup) -> None:
    """The stack's client (PrometheusConnect) reads, over the session that bounds it."""
    source = PrometheusSource(prometheus.url, timeout=2)
    assert isinstance(source.client, PrometheusConnect)
    assert isinstance(source.client._session, BoundedSession)
    assert source.client.check_prometheus_connection()


def test_a_prometheus_answer_past_max_bytes_is_an_error(prometheus: PrometheusSetup) -> None:
    with pytest.raises(SourceError, match="larger than 100 bytes"):
        PrometheusSource(prometheus.url, max_bytes=100).fetch()


def test_prometheus_series_past_the_cap_are_counted(prometheus: PrometheusSetup) -> None:
    fetched = PrometheusSource(prometheus.url, limits=Limits(max_series=3)).fetch()
    assert fetched.parse.samples == 3 and fetched.parse.skipped_reasons[SERIES_CAP] > 0


def test_a_prometheus_through_the_proxy_reads_the_same(prometheus: PrometheusSetup) -> None:
    with FaultyProxy(prometheus.url) as proxy:
        fetched = PrometheusSource(proxy.base_url, matchers='job="dcgm-old"').fetch()
    assert only(fetched.gpus, "prom-c", 0).pod == PodRef("research", "bert-0", "bert")


def test_exporter_variants_are_also_read_by_a_direct_scrape(prometheus: PrometheusSetup) -> None:
    urls = [exporter.url for exporter in prometheus.exporters.values()]
    gpus = ScrapeSource(urls).fetch().gpus
    assert only(gpus, "prom-b", 0).pod == PodRef("serving", "tts-predictor-0", "kserve-container")
    assert only(gpus, "prom-c", 0).pod == PodRef("research", "bert-0", "bert")
    assert len(by_key(gpus)) == 9


def test_a_lowercase_hostname_exporter(exporter: FakeExporter) -> None:
    exporter.flavor = ExporterFlavor(hostname_label="hostname")
    exporter.states = [gpu("node-x", 0, gpu_util=5), *OPERATOR_STATES]
    gpus = ScrapeSource([exporter.url]).fetch().gpus
    assert only(gpus, "node-x", 0).values["gpu_util"] == pytest.approx(0.05)
