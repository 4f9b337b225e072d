"""`manage.py ingesttelemetry [--once | --loop]`: the telemetry worker.

Each cycle (`run_once`) is a few small steps:
1. fetch GPU samples from the source (Prometheus or the exporters themselves), within one
   deadline of --timeout for the whole fetch, placed only on the cluster's nodes, within the
   source's caps on series and nodes (telemetry.sources); an error is logged and counted, and the
   cycle goes on without new data; what was left out is logged, counted and shown on the
   dashboard's sources;
2. store them (latest values, raw history, node freshness);
3. mark stale the nodes whose newest sample is older than the freshness window, so an outage
   shows within one interval;
4. hand the GPUs the exporter shows each pod on to the holders check (telemetry.holders: the
   scheduler's, which compares them with those gpusched recorded and takes what pods really
   hold as the truth), and count the mismatches it finds;
5. roll closed minutes up, prune what is past retention, record the source's status.
SIGTERM/SIGINT finish the current cycle and exit. With --once (the default), a cycle that got
no data exits with status 1. With --loop --metrics-port, Prometheus metrics (telemetry/metrics.py)
are served on that port with /healthz (the loop turns) and /readyz (the last cycle finished; a
cycle that got no data from the source still finished: that is in the metrics). A cycle that fails
(the database away) is logged and retried by the loop after a backoff.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from datetime import datetime
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils import timezone

from common.loop import LoopCommand
from common.process_metrics import add_metrics_arguments, serve_metrics, stop_serving
from telemetry import conf, metrics, selectors, services
from telemetry.cycle_report import CycleReport
from telemetry.gcpause import paused_gc
from telemetry.holders import holders_check, observed_from_samples
from telemetry.sources import Fetched, Limits, PrometheusSource, ScrapeSource, TelemetrySource

logger = logging.getLogger("telemetry.ingest")

DEFAULT_PROMETHEUS_URL = "http://127.0.0.1:9090"
DEFAULT_TARGETS = "http://127.0.0.1:9400/metrics"


class Command(LoopCommand):
    help = "Ingest DCGM telemetry (one cycle by default, --loop to keep going)."
    default_interval = 15.0
    default_stuck_intervals = 10  # a 5,000-node cycle takes ~2 s (docs/benchmarks.md)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.source: TelemetrySource | None = None
        self.clock: Callable[[], datetime] = timezone.now
        self.cycles = 0
        self.failures = 0
        self.mismatches_seen: set[tuple[str, tuple[int, ...]]] = set()  # counted once each

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_loop_arguments(parser)  # --once | --loop, --interval (between cycle starts)
        parser.add_argument("--source", choices=["prometheus", "scrape"], default="scrape")
        parser.add_argument(
            "--prometheus-url",
            default=os.environ.get("GPUSCHED_PROMETHEUS_URL", DEFAULT_PROMETHEUS_URL),
        )
        parser.add_argument(
            "--matchers", default="", help='extra PromQL label matchers, e.g. job="dcgm"'
        )
        parser.add_argument(
            "--targets",
            default=os.environ.get("GPUSCHED_TELEMETRY_TARGETS", DEFAULT_TARGETS),
            help="comma-separated exporter /metrics URLs (--source scrape)",
        )
        parser.add_argument(
            "--timeout", type=float, default=2.0, help="for the whole fetch of a cycle, seconds"
        )
        parser.add_argument("--json", action="store_true", help="one JSON line per cycle")
        add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.source = build_source(options)
        self.configure_loop(options)
        if not options["loop"]:
            report = self.run_once()
            self.report(report, as_json=options["json"])
            if not report.ok:
                raise CommandError(f"{report.source}: no telemetry this cycle")
            return
        server = serve_metrics(
            metrics.registry, self.health, options["metrics_host"], options["metrics_port"]
        )
        try:
            self.run_loop(lambda: self.loop_step(as_json=options["json"]), loop=True)
        finally:
            stop_serving(server)

    def loop_step(self, *, as_json: bool) -> float:
        """One cycle of --loop; returns the wait until the next one starts."""
        started = time.monotonic()
        report = self.run_once()
        metrics.record_cycle(report)
        self.report(report, as_json=as_json)
        return max(self.interval - (time.monotonic() - started), 0.0)

    def report(self, report: CycleReport, *, as_json: bool) -> None:
        self.stdout.write(json.dumps(asdict(report)) if as_json else report.line())

    # --- one cycle -----------------------------------------------------------------------------

    def run_once(self) -> CycleReport:
        if self.source is None:
            raise CommandError("no telemetry source configured")
        started = time.monotonic()
        now = self.clock()
        report = CycleReport(at=now.isoformat(), source=self.source.name)
        with paused_gc():
            fetched = self.fetch_step(report)
            store_started = time.monotonic()
            if fetched is not None:
                self.store_step(fetched, now, report)
            del fetched
        report.stale_marked = services.freshness_mark(now=now)
        report.minutes_rolled = services.telemetry_rollup(now=now)
        report.raw_pruned = services.telemetry_prune(now=now).raw
        services.source_status_record(
            name=self.source.name,
            now=now,
            error=None if report.ok else "; ".join(report.errors) or "no data",
            gpus=report.gpus,
            warning="; ".join(report.left_out),
        )
        self.cycles += 1
        self.failures += 0 if report.ok else 1
        report.store_s = round(time.monotonic() - store_started, 4)
        report.total_s = round(time.monotonic() - started, 4)
        return report

    def fetch_step(self, report: CycleReport) -> Fetched | None:
        assert self.source is not None
        started = time.monotonic()
        try:
            fetched = self.source.fetch(selectors.cluster_nodes())
        except Exception as exc:  # any source failure: count it, keep the previous data
            logger.warning("ingesttelemetry: %s source failed: %s", self.source.name, exc)
            report.errors.append(str(exc))
            return None
        finally:
            report.fetch_s = round(time.monotonic() - started, 4)
        for error in fetched.errors:
            logger.warning("ingesttelemetry: %s", error)
        if fetched.parse.skipped:
            logger.warning(
                "ingesttelemetry: skipped %d lines: %s",
                fetched.parse.skipped,
                "; ".join(fetched.parse.examples),
            )
        if fetched.mapping.skipped:
            logger.warning(
                "ingesttelemetry: left out samples: %s%s",
                ", ".join(f"{reason} ({n})" for reason, n in fetched.mapping.skipped.items()),
                f"; names on no node of the cluster: {', '.join(fetched.mapping.unknown_nodes)}"
                if fetched.mapping.unknown_nodes
                else "",
            )
        report.left_out = fetched.capped + (
            [f"series naming no node of the cluster (e.g. {fetched.mapping.unknown_nodes[0]})"]
            if fetched.mapping.unknown_nodes
            else []
        )
        report.nodes_by_rule = dict(fetched.mapping.attributed)
        report.errors.extend(fetched.errors)
        report.samples = fetched.parse.samples
        report.skipped = fetched.parse.skipped
        report.skipped_reasons = dict(fetched.parse.skipped_reasons)
        report.samples_skipped = sum(fetched.mapping.skipped.values())
        report.samples_skipped_reasons = dict(fetched.mapping.skipped)
        report.values_clamped = dict(fetched.mapping.clamped)
        return fetched

    def store_step(self, fetched: Fetched, now: datetime, report: CycleReport) -> None:
        assert self.source is not None
        result = services.samples_ingest(
            gpus=fetched.gpus, observed_at=now, source=self.source.name
        )
        report.ok = True
        report.gpus = result.gpus
        report.nodes = result.nodes
        check = holders_check()
        if check is None:
            return
        reconciled = check(observed_from_samples(fetched.gpus))
        for mismatch in reconciled.mismatches:
            key = (mismatch.pod_uid, mismatch.observed)
            if key in self.mismatches_seen:
                continue
            self.mismatches_seen.add(key)
            report.assignment_mismatches += 1
            why = (reconciled.refused or {}).get(mismatch.pod_uid)
            logger.warning(
                "ingesttelemetry: GPU assignment mismatch on %s: %s%s",
                mismatch.node,
                mismatch.describe(),
                f" (not corrected: {why})" if why else " (corrected)",
            )
        report.assignments_corrected = reconciled.corrected


def build_source(options: dict[str, Any]) -> TelemetrySource:
    timeout = options.get("timeout") or 2.0
    limits = Limits(
        max_series=conf.count("TELEMETRY_MAX_SERIES_PER_SOURCE"),
        max_nodes=conf.count("TELEMETRY_MAX_NODES_PER_SOURCE"),
    )
    if options.get("source") == "prometheus":
        return PrometheusSource(
            options["prometheus_url"],
            timeout=timeout,
            matchers=options.get("matchers") or "",
            limits=limits,
        )
    targets = [target.strip() for target in options["targets"].split(",") if target.strip()]
    if not targets:
        raise CommandError("--targets: give at least one exporter URL")
    return ScrapeSource(targets, timeout=timeout, limits=limits)
