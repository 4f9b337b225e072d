"""The telemetry figures the web process's /metrics exports, read at scrape time (registered in
gpusched/web_metrics.py): the age of the newest sample and each source's health, per source, and
the nodes reporting by freshness."""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, Max
from prometheus_client.core import GaugeMetricFamily

from common.metric_families import age, counts, gauge
from telemetry.models import GpuLatest, NodeTelemetry, SourceStatus


class TelemetryCollector:
    def collect(self) -> Iterator[GaugeMetricFamily]:
        newest = {
            source: age(sampled_at)
            for source, sampled_at in GpuLatest.objects.values_list("source")
            .annotate(newest=Max("sampled_at"))
            .order_by()
        }
        yield gauge(
            "gpusched_telemetry_sample_age_seconds",
            "Seconds since the newest GPU sample, per telemetry source.",
            newest,
            "source",
        )
        statuses = list(SourceStatus.objects.all())
        yield gauge(
            "gpusched_telemetry_source_last_success_age_seconds",
            "Seconds since the source last delivered data (+Inf: never).",
            {s.name: age(s.last_success_at) for s in statuses},
            "source",
        )
        yield gauge(
            "gpusched_telemetry_source_consecutive_failures",
            "Ingest cycles in a row that got no data from the source.",
            {s.name: s.consecutive_failures for s in statuses},
            "source",
        )
        states = counts(
            NodeTelemetry.objects.values_list("state").annotate(n=Count("id")).order_by(),
            (NodeTelemetry.State.FRESH, NodeTelemetry.State.STALE),
        )
        yield gauge(
            "gpusched_telemetry_nodes", "Nodes reporting telemetry, by freshness.", states, "state"
        )
