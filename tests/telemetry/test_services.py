"""Telemetry services: ingest, rollup, freshness, retention, source status (DB: SQLite, or
PostgreSQL in scripts/test.sh's PostgreSQL pass)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings

from telemetry import services
from telemetry.models import (
    GpuLatest,
    GpuMinute,
    GpuSampleRaw,
    NodeTelemetry,
    PodMinute,
    SourceStatus,
)
from tests.telemetry.factories import T0, sample

# The upserts and rollups are hand-written SQL (ON CONFLICT, window functions) that must behave
# the same on PostgreSQL: the module runs again in the PostgreSQL pass.
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_ingest_stores_latest_values_raw_rows_and_node_freshness() -> None:
    result = services.samples_ingest(
        gpus=[
            sample("n1", 0, busy=0.8, fb_used=100, pod="train-0", gpu_util=0.9, power_w=300),
            sample("n1", 1, busy=None, fb_used=0, gpu_util=0.1, xid_last=79),
            sample("n2", 0, busy=0.2),
        ],
        observed_at=T0,
        source="scrape",
    )
    assert (result.gpus, result.nodes, result.raw_rows) == (3, 2, 3)

    row = GpuLatest.objects.get(node="n1", gpu_index=0)
    assert row.busy == 0.8 and row.gr_engine_active == 0.8 and row.gpu_util == 0.9
    assert row.fb_used_mib == 100 and row.power_w == 300 and row.temp_c is None
    assert row.pods == [["ns", "train-0", "main"]]
    assert row.sampled_at == T0 and row.source == "scrape"
    assert row.uuid == "GPU-n1-0" and row.model_name == "NVIDIA H100 80GB HBM3"
    fallback = GpuLatest.objects.get(node="n1", gpu_index=1)
    assert fallback.busy == 0.1 and fallback.xid_last == 79 and fallback.pods == []

    raw = GpuSampleRaw.objects.get(node="n1", gpu_index=0)
    assert (raw.namespace, raw.pod, raw.busy, raw.primary) == ("ns", "train-0", 0.8, True)
    nodes = {n.node: n for n in NodeTelemetry.objects.all()}
    assert nodes["n1"].gpus == 2 and nodes["n1"].state == "fresh"
    assert nodes["n1"].last_sample_at == T0


def test_ingest_updates_in_place_and_forgets_fields_no_longer_reported() -> None:
    services.samples_ingest(gpus=[sample(busy=0.8, power_w=300)], observed_at=T0, source="s")
    later = T0 + timedelta(seconds=15)
    services.samples_ingest(gpus=[sample(busy=0.3)], observed_at=later, source="s")

    row = GpuLatest.objects.get()
    assert (row.busy, row.power_w, row.sampled_at) == (0.3, None, later)
    assert GpuSampleRaw.objects.count() == 2
    assert NodeTelemetry.objects.get().last_sample_at == later


def test_a_shared_gpu_lists_its_pods_and_has_one_primary_raw_row() -> None:
    services.samples_ingest(
        gpus=[sample(busy=0.6, pod="a"), sample(busy=0.6, pod="b")], observed_at=T0, source="s"
    )
    row = GpuLatest.objects.get()
    assert row.pods == [["ns", "a", "main"], ["ns", "b", "main"]]
    assert sorted(GpuSampleRaw.objects.values_list("pod", "primary")) == [
        ("a", True),
        ("b", False),
    ]
    assert NodeTelemetry.objects.get().gpus == 1


def test_mig_instances_are_separate_rows() -> None:
    services.samples_ingest(
        gpus=[
            sample(index=3, mig="9", profile="1g.10gb", busy=0.5),
            sample(index=3, mig="10", profile="1g.10gb", busy=0.25),
        ],
        observed_at=T0,
        source="s",
    )
    assert sorted(GpuLatest.objects.values_list("mig_instance", "busy")) == [
        ("10", 0.25),
        ("9", 0.5),
    ]


def test_the_age_starts_at_the_samples_own_timestamp() -> None:
    measured = T0 - timedelta(seconds=40)
    services.samples_ingest(
        gpus=[sample(timestamp=measured.timestamp()), sample(index=1, timestamp=4e9)],
        observed_at=T0,
        source="prometheus",
    )
    times = dict(GpuLatest.objects.values_list("gpu_index", "sampled_at"))
    assert times[0] == measured
    assert times[1] == T0  # a timestamp from the future is clamped to now
    assert NodeTelemetry.objects.get().last_sample_at == T0


def test_an_empty_batch_is_fine() -> None:
    result = services.samples_ingest(gpus=[], observed_at=T0, source="s")
    assert (result.gpus, result.nodes, result.raw_rows) == (0, 0, 0)


def ingest_minute(values: list[tuple[float, float | None, float | None]]) -> None:
    """Readings at T0+0s, +5s, ...: each (seconds, busy of GPU 0, busy of GPU 1); both GPUs
    belong to pod "train" (a 2-GPU pod), GPU 2 is idle and pod-less."""
    for seconds, busy0, busy1 in values:
        services.samples_ingest(
            gpus=[
                sample(index=0, busy=busy0, fb_used=1000, pod="train"),
                sample(index=1, busy=busy1, fb_used=3000, pod="train"),
                sample(index=2, busy=0.0, fb_used=0),
            ],
            observed_at=T0 + timedelta(seconds=seconds),
            source="s",
        )


def test_rollup_computes_avg_max_and_nearest_rank_p95_per_gpu_and_pod() -> None:
    # 20 readings of GPU 0: 0.00, 0.05, ..., 0.95 -> nearest-rank p95 = 19th = 0.90
    ingest_minute([(s * 3, s * 0.05, 0.5 if s % 2 else None) for s in range(20)])

    assert services.telemetry_rollup(now=T0 + timedelta(seconds=59)) == 0  # minute still open
    assert services.telemetry_rollup(now=T0 + timedelta(seconds=61)) == 1
    assert services.telemetry_rollup(now=T0 + timedelta(seconds=62)) == 0  # once per minute

    gpu0 = GpuMinute.objects.get(gpu_index=0)
    assert gpu0.minute == T0 and gpu0.samples == 20
    assert gpu0.busy_avg == pytest.approx(0.475)
    assert gpu0.busy_max == pytest.approx(0.95)
    assert gpu0.busy_p95 == pytest.approx(0.90)
    assert gpu0.fb_used_avg == 1000
    gpu1 = GpuMinute.objects.get(gpu_index=1)  # NULL busy half of the time: not counted
    assert gpu1.samples == 20 and gpu1.busy_avg == 0.5 and gpu1.busy_p95 == 0.5

    pod = PodMinute.objects.get()
    assert (pod.namespace, pod.pod, pod.samples) == ("ns", "train", 20)
    assert pod.gpus_avg == 2
    # Per reading: used = busy0 + (busy1 or 0); odd readings add 0.5.
    used = sorted(s * 0.05 + (0.5 if s % 2 else 0) for s in range(20))
    assert pod.used_avg == pytest.approx(sum(used) / 20)
    assert pod.used_max == pytest.approx(max(used))
    assert pod.used_p95 == pytest.approx(used[18])
    assert pod.fb_used_avg == 4000 and pod.fb_used_max == 4000


def test_p95_of_few_readings_is_the_max() -> None:
    ingest_minute([(0, 0.1, 0.1), (15, 0.9, 0.1), (30, 0.2, 0.1), (45, 0.3, 0.1)])
    services.telemetry_rollup(now=T0 + timedelta(minutes=1))
    assert GpuMinute.objects.get(gpu_index=0).busy_p95 == pytest.approx(0.9)


def test_a_shared_gpu_counts_once_in_its_gpu_rollup() -> None:
    services.samples_ingest(
        gpus=[sample(busy=0.6, pod="a"), sample(busy=0.6, pod="b")], observed_at=T0, source="s"
    )
    services.telemetry_rollup(now=T0 + timedelta(minutes=1))
    assert GpuMinute.objects.get().samples == 1
    assert sorted(PodMinute.objects.values_list("pod", "used_avg")) == [("a", 0.6), ("b", 0.6)]


def test_rollup_catches_up_minute_by_minute_and_skips_empty_minutes() -> None:
    for minute in (0, 1, 3):
        services.samples_ingest(
            gpus=[sample(busy=minute / 10)], observed_at=T0 + timedelta(minutes=minute), source="s"
        )
    assert services.telemetry_rollup(now=T0 + timedelta(minutes=4, seconds=1)) == 4
    minutes = dict(GpuMinute.objects.values_list("minute", "busy_avg"))
    assert minutes == {
        T0: 0.0,
        T0 + timedelta(minutes=1): 0.1,
        T0 + timedelta(minutes=3): pytest.approx(0.3),
    }
    assert services.telemetry_rollup(now=T0 + timedelta(minutes=5)) == 1  # minute 4: empty


def test_rollup_with_nothing_to_do() -> None:
    assert services.telemetry_rollup(now=T0) == 0


def test_rollup_is_bounded_per_call() -> None:
    services.samples_ingest(gpus=[sample()], observed_at=T0, source="s")
    assert services.telemetry_rollup(now=T0 + timedelta(minutes=10), max_minutes=3) == 3


@override_settings(TELEMETRY_FRESHNESS_SECONDS=30)
def test_freshness_mark_marks_nodes_stale_past_the_window() -> None:
    services.samples_ingest(gpus=[sample("old")], observed_at=T0, source="s")
    services.samples_ingest(
        gpus=[sample("new")], observed_at=T0 + timedelta(seconds=20), source="s"
    )
    assert services.freshness_mark(now=T0 + timedelta(seconds=30)) == 0
    assert services.freshness_mark(now=T0 + timedelta(seconds=31)) == 1
    states = dict(NodeTelemetry.objects.values_list("node", "state"))
    assert states == {"old": "stale", "new": "fresh"}
    # A sample brings it back.
    services.samples_ingest(gpus=[sample("old")], observed_at=T0 + timedelta(minutes=1), source="s")
    assert NodeTelemetry.objects.get(node="old").state == "fresh"


@override_settings(
    TELEMETRY_RAW_RETENTION_SECONDS=600,
    TELEMETRY_GPU_MINUTE_RETENTION_SECONDS=3600,
    TELEMETRY_POD_MINUTE_RETENTION_SECONDS=3600,
    TELEMETRY_GPU_RETENTION_SECONDS=7200,
)
def test_prune_applies_each_retention() -> None:
    services.samples_ingest(gpus=[sample("gone", pod="p")], observed_at=T0, source="s")
    services.telemetry_rollup(now=T0 + timedelta(minutes=1))
    later = T0 + timedelta(hours=1, minutes=30)
    services.samples_ingest(gpus=[sample("here", pod="p")], observed_at=later, source="s")

    result = services.telemetry_prune(now=T0 + timedelta(minutes=5))
    assert result.raw == 0
    result = services.telemetry_prune(now=later)
    assert (result.raw, result.gpu_minutes, result.pod_minutes) == (1, 1, 1)
    assert (result.gpus, result.nodes) == (0, 0)  # "gone" reported 90 min ago: kept for 2 h
    result = services.telemetry_prune(now=T0 + timedelta(hours=2, minutes=1))
    assert (result.gpus, result.nodes) == (1, 1)
    assert list(GpuLatest.objects.values_list("node", flat=True)) == ["here"]
    assert list(NodeTelemetry.objects.values_list("node", flat=True)) == ["here"]


@override_settings(
    TELEMETRY_GPU_MINUTE_RETENTION_SECONDS=3600, TELEMETRY_POD_MINUTE_RETENTION_SECONDS=7200
)
def test_gpu_and_pod_rollups_have_their_own_retention() -> None:
    services.samples_ingest(gpus=[sample(pod="p")], observed_at=T0, source="s")
    services.telemetry_rollup(now=T0 + timedelta(minutes=1))
    result = services.telemetry_prune(now=T0 + timedelta(minutes=90))
    assert (result.gpu_minutes, result.pod_minutes) == (1, 0)
    result = services.telemetry_prune(now=T0 + timedelta(minutes=150))
    assert (result.gpu_minutes, result.pod_minutes) == (0, 1)


def test_source_status_counts_failures_and_resets_on_success() -> None:
    services.source_status_record(name="prometheus", now=T0, gpus=8)
    services.source_status_record(name="prometheus", now=T0, error="connection refused")
    status = services.source_status_record(name="prometheus", now=T0, error="timed out")
    assert (status.consecutive_failures, status.failures_total) == (2, 2)
    assert status.last_error == "timed out" and status.last_success_at == T0
    status = services.source_status_record(name="prometheus", now=T0 + timedelta(seconds=1), gpus=9)
    assert (status.consecutive_failures, status.failures_total, status.last_gpus) == (0, 2, 9)
    assert SourceStatus.objects.count() == 1
