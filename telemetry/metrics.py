"""The telemetry ingester's Prometheus metrics, fed from each cycle's report.

`ingesttelemetry --loop --metrics-port N` serves `registry` on :N/metrics.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from common.process_metrics import role_registry
from telemetry.cycle_report import CycleReport

registry = role_registry()

cycles = Counter(
    "gpusched_telemetry_ingest_cycles",
    "Ingest cycles by result: ok (data stored) or failed (no data from the source).",
    ["result"],
    registry=registry,
)
samples_ingested = Counter(
    "gpusched_telemetry_samples_ingested",
    "Samples parsed from the source in successful cycles.",
    registry=registry,
)
lines_skipped = Counter(
    "gpusched_telemetry_lines_skipped",
    "Exposition lines (or vector items) skipped as malformed, by reason.",
    ["reason"],
    registry=registry,
)
samples_skipped = Counter(
    "gpusched_telemetry_samples_skipped",
    "Samples read but not stored, by reason (a series naming no storable GPU, a value outside "
    "its field's range).",
    ["reason"],
    registry=registry,
)
values_clamped = Counter(
    "gpusched_telemetry_values_clamped",
    "Values just past their field's range, stored at its edge, by metric.",
    ["metric"],
    registry=registry,
)
series_placed = Counter(
    "gpusched_telemetry_series_placed",
    "Label sets (a GPU, or a GPU and pod) placed on a node, by the rule that named it: node "
    "label, Hostname, instance, scrape target (telemetry.placement).",
    ["rule"],
    registry=registry,
)
assignment_mismatches = Counter(
    "gpusched_gpu_assignment_mismatches",
    "Pods dcgm-exporter shows on other GPUs than gpusched recorded (each pod and GPU set once), "
    "by whether the record was corrected to what the pod holds.",
    ["result"],
    registry=registry,
)
gpus_reporting = Gauge(
    "gpusched_telemetry_gpus_reporting",
    "GPUs (and MIG instances) stored by the last successful cycle.",
    registry=registry,
)
cycle_seconds = Histogram(
    "gpusched_telemetry_ingest_duration_seconds",
    "Whole ingest cycles: fetch, store, freshness, rollup, prune.",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0),
    registry=registry,
)
# A timestamp rather than an age, the Prometheus convention (node_exporter's *_timestamp_seconds):
# the age is `time() - gpusched_telemetry_last_success_timestamp_seconds` in a query or an alert.
last_success = Gauge(
    "gpusched_telemetry_last_success_timestamp_seconds",
    "Unix time of this ingester's last successful cycle (0 before the first).",
    registry=registry,
)
for _result in ("ok", "failed"):
    cycles.labels(result=_result)
for _result in ("corrected", "uncorrected"):
    assignment_mismatches.labels(result=_result)


def record_cycle(report: CycleReport) -> None:
    cycle_seconds.observe(report.total_s)
    for reason, count in report.skipped_reasons.items():
        lines_skipped.labels(reason=reason).inc(count)
    for reason, count in report.samples_skipped_reasons.items():
        samples_skipped.labels(reason=reason).inc(count)
    for metric, count in report.values_clamped.items():
        values_clamped.labels(metric=metric).inc(count)
    for rule, count in report.nodes_by_rule.items():
        series_placed.labels(rule=rule).inc(count)
    corrected = min(report.assignments_corrected, report.assignment_mismatches)
    assignment_mismatches.labels(result="corrected").inc(corrected)
    assignment_mismatches.labels(result="uncorrected").inc(report.assignment_mismatches - corrected)
    if report.ok:
        samples_ingested.inc(report.samples)
        gpus_reporting.set(report.gpus)
        last_success.set_to_current_time()
    # Counted last: a scrape that sees the cycle sees everything else it did too.
    cycles.labels(result="ok" if report.ok else "failed").inc()
