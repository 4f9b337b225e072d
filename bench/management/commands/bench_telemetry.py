"""`manage.py bench_telemetry --nodes 5000 --gpus 8 --fields 10 --json`: one scrape, timed.

Renders one dcgm-exporter scrape of nodes x GPUs x fields (not timed), then times what the
ingester does with it: parse (text -> samples), map (samples -> GPUs and pods), store (latest
values, raw history, node freshness), reconcile the GPU ids pods hold with those recorded
(scheduling.services.assignments_reconcile, the ingester's holders check) and roll up (the
scrape's minute, closed), all in the configured database, which must hold no other telemetry
(`make bench-telemetry` uses a fresh SQLite file, migrated first; an unmigrated database is refused
with that advice). The rows it wrote are deleted afterwards unless --keep.
"""

from __future__ import annotations

import json
import os
import platform
import time
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from scheduling.services import assignments_reconcile
from telemetry import services
from telemetry.dcgm import FIELDS
from telemetry.exposition import ALL_FIELDS, GpuState, render_exposition
from telemetry.gcpause import paused_gc
from telemetry.holders import observed_from_samples
from telemetry.mapping import gpu_samples_from_scrape
from telemetry.models import (
    GpuLatest,
    GpuMinute,
    GpuSampleRaw,
    NodeTelemetry,
    PodMinute,
)
from telemetry.parsing import parse_scrape

NODE_PREFIX = "bench-node-"


def bench_states(nodes: int, gpus: int) -> list[GpuState]:
    """A busy cluster: most GPUs held by a pod (some pods span several GPUs), varied values."""
    states = []
    for n in range(nodes):
        host = f"{NODE_PREFIX}{n:05d}"
        for g in range(gpus):
            load = (n * 37 + g * 11) % 100
            held = load % 5 != 0
            pod = f"job-{n:05d}-{g // 2}" if held else None
            states.append(
                GpuState(
                    hostname=host,
                    gpu=g,
                    uuid=f"GPU-{n:08x}-{g:04x}-4c5d-8e9f-0a1b2c3d4e5f",
                    gpu_util=float(load),
                    mem_copy_util=float(load // 2),
                    fb_used_mib=float(load * 800),
                    fb_free_mib=float(81559 - load * 800),
                    power_w=70.0 + load * 3.1,
                    temp_c=35.0 + load / 4,
                    xid_last=0.0,
                    gr_engine_active=load / 100 * 0.93,
                    tensor_active=load / 100 * 0.4,
                    dram_active=load / 100 * 0.5,
                    namespace=f"team-{n % 40:02d}" if held else None,
                    pod=pod,
                    container="main" if held else None,
                )
            )
    return states


class Command(BaseCommand):
    help = "Time one telemetry scrape: parse, map, store and roll up (DESIGN.md §9)."
    requires_system_checks: list[str] = []  # a benchmark of one app: not blocked by the others

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=5000)
        parser.add_argument("--gpus", type=int, default=8, help="GPUs per node")
        parser.add_argument("--fields", type=int, default=len(FIELDS), help="DCGM fields per GPU")
        parser.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
        parser.add_argument("--keep", action="store_true", help="keep the rows it wrote")
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if not 1 <= options["fields"] <= len(ALL_FIELDS):
            raise CommandError(f"--fields: 1 to {len(ALL_FIELDS)}")
        if options["repeat"] < 1 or (options["keep"] and options["repeat"] > 1):
            raise CommandError("--repeat: at least 1, and 1 with --keep")
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            raise CommandError(
                f"the database {connection.settings_dict['NAME']} is not migrated: run "
                "`python manage.py migrate` on it first (`make bench-telemetry` does, on a "
                "fresh SQLite file)"
            )
        text = render_exposition(
            bench_states(options["nodes"], options["gpus"]),
            fields=ALL_FIELDS[: options["fields"]],
        )
        self._clean()
        if GpuLatest.objects.exists() or GpuSampleRaw.objects.exists():
            # Rolling the bench's minute up early would close that minute for real data too.
            raise CommandError(
                "bench_telemetry needs an empty telemetry database, e.g. "
                "DATABASE_URL=sqlite:///var/bench-telemetry.sqlite3 (migrated first)"
            )
        runs = []
        try:
            for _ in range(options["repeat"]):
                runs.append(self._run(text, timezone.now()))
                if not options["keep"]:
                    self._clean()
        finally:
            if not options["keep"]:
                self._clean()
        # The median run (by total time) stands for the benchmark; all totals are listed.
        result = sorted(runs, key=lambda run: run["total_s"])[len(runs) // 2]
        result["runs_total_s"] = [run["total_s"] for run in runs]
        result["runs_cpu_s"] = [run["cpu_s"] for run in runs]
        result.update(
            nodes=options["nodes"],
            gpus_per_node=options["gpus"],
            fields=options["fields"],
            database=connection.vendor,
            python=platform.python_version(),
            machine=f"{platform.machine()} {os.cpu_count()} CPUs",
        )
        if options["json"]:
            self.stdout.write(json.dumps(result))
        else:
            self.stdout.write(
                f"{result['samples']} samples ({result['lines']} lines): parse "
                f"{result['parse_s']:.3f} s, rollup {result['rollup_s']:.3f} s, total "
                f"{result['total_s']:.3f} s (cpu {result['cpu_s']:.3f} s)"
            )

    def _run(self, text: str, now: Any) -> dict[str, Any]:
        cpu0, t0 = time.process_time(), time.perf_counter()
        with paused_gc():  # as ingesttelemetry's cycle does
            scrape = parse_scrape(text)
            stats = scrape.stats
            gpus, mapping = gpu_samples_from_scrape(scrape)
            t1 = time.perf_counter()
            stored = services.samples_ingest(gpus=gpus, observed_at=now, source="bench")
            reconciled = assignments_reconcile(observed_from_samples(gpus))
            t2 = time.perf_counter()
            del scrape, gpus
        # The minute of this scrape, closed: what the ingester does once a minute.
        minutes = services.telemetry_rollup(now=now + timedelta(minutes=1))
        t3, cpu3 = time.perf_counter(), time.process_time()
        return {
            "lines": stats.lines,
            "samples": stats.samples,
            "skipped": stats.skipped,
            "gpus": stored.gpus,
            "minutes_rolled": minutes,
            "parse_s": round(t1 - t0, 4),  # parse and map
            "store_s": round(t2 - t1, 4),  # store and reconcile GPU ids
            "mismatches": len(reconciled.mismatches),
            "rollup_s": round(t3 - t1, 4),  # store and roll up
            "total_s": round(t3 - t0, 4),
            "seconds": round(t3 - t0, 4),
            "cpu_s": round(cpu3 - cpu0, 4),
            "mapped": mapping.used,
        }

    def _clean(self) -> None:
        with transaction.atomic():
            for model in (GpuLatest, GpuSampleRaw, GpuMinute, NodeTelemetry):
                model.objects.filter(node__startswith=NODE_PREFIX).delete()
            PodMinute.objects.filter(pod__startswith="job-", namespace__startswith="team-").delete()
