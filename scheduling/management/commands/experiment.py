"""`manage.py experiment fairshare`: FIFO against gpusched's fair sharing on the Philly trace
(scheduling/experiments/fairshare.py), on the pure core, no database.

    python manage.py experiment fairshare --json
    python manage.py experiment fairshare --days 7 --nodes 64 --policies fifo,gpusched
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from scheduling.core.plugin_args import ProfileError
from scheduling.core.scheduler import Framework
from scheduling.experiments import fairshare
from scheduling.profile_files import load_profile

REPO = Path(__file__).resolve().parents[3]
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "philly" / "philly.csv"
EXPERIMENTS = ("fairshare",)


class Command(BaseCommand):
    help = "Run an experiment on recorded traces (fairshare: FIFO vs fair sharing on Philly)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", choices=EXPERIMENTS)
        parser.add_argument("--trace", default=str(DEFAULT_TRACE), help="Philly digest CSV")
        parser.add_argument("--start", default="2017-10-02", help="window start (UTC date)")
        parser.add_argument("--days", type=float, default=7.0, help="window length")
        parser.add_argument("--nodes", type=int, default=64, help="8-GPU servers (P100)")
        parser.add_argument("--step", type=float, default=60.0, help="scheduling grid, seconds")
        parser.add_argument("--drain-days", type=float, default=7.0, help="time to finish after")
        parser.add_argument(
            "--policies", default=",".join(fairshare.POLICIES), help="comma-separated"
        )
        parser.add_argument("--profile", default="topology", help="scheduler profile")
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")

    def handle(self, *args: Any, **options: Any) -> None:
        path = Path(options["trace"])
        if not path.is_file():
            raise CommandError(f"--trace: no such file {path}")
        try:
            start = datetime.strptime(options["start"], "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise CommandError(f"--start: expected YYYY-MM-DD, got {options['start']!r}") from None
        policies = [p.strip() for p in options["policies"].split(",") if p.strip()]
        unknown = [p for p in policies if p not in fairshare.POLICIES]
        if unknown:
            raise CommandError(
                f"--policies: unknown {unknown[0]!r} (known: {', '.join(fairshare.POLICIES)})"
            )
        try:
            profile = load_profile(options["profile"])
        except ProfileError as exc:
            raise CommandError(str(exc)) from exc
        trace = fairshare.load_trace(path, start=start, days=options["days"])
        if not trace.jobs:
            raise CommandError("no job in that window")
        doc: dict[str, Any] = {
            "experiment": "fairshare",
            "trace": {
                "path": str(path),
                "start": start.date().isoformat(),
                "days": options["days"],
                "jobs": len(trace.jobs),
                "tenants": len({j.tenant for j in trace.jobs}),
                "gang_jobs": sum(1 for j in trace.jobs if j.pods > 1),
            },
            "cluster": {
                "nodes": options["nodes"],
                "gpus": options["nodes"] * 8,
                "gpu_model": fairshare.GPU_MODEL,
                "profile": options["profile"],
                "step_s": options["step"],
            },
        }
        for policy in policies:
            result = fairshare.simulate(
                trace,
                policy,
                Framework(profile),
                nodes=options["nodes"],
                step_s=options["step"],
                drain_days=options["drain_days"],
                progress=None if options["json"] else self._progress,
            )
            doc[policy] = result.as_json()
            if not options["json"]:
                sys.stderr.write("\n")
                self._summary(policy, result)
        if "fifo" in doc and "gpusched" in doc:
            fifo, fair = doc["fifo"], doc["gpusched"]
            doc["criteria"] = {
                "jain_improved": fair["jain"] > fifo["jain"],
                "worst_tenant_wait_p95_improved": (
                    fair["worst_tenant_wait_p95_s"] < fifo["worst_tenant_wait_p95_s"]
                ),
                "gpu_allocation_change_points": round(
                    100 * (fair["gpu_allocation"] - fifo["gpu_allocation"]), 2
                ),
                "no_partial_gangs": fair["gangs_partially_started"] == 0
                and fifo["gangs_partially_started"] == 0,
            }
        if options["json"]:
            self.stdout.write(json.dumps(doc, indent=2))
        elif "criteria" in doc:
            self.stdout.write(json.dumps(doc["criteria"]))

    def _progress(self, policy: str, fraction: float) -> None:
        sys.stderr.write(f"\r{policy}: {100 * fraction:5.1f}% of the window")

    def _summary(self, policy: str, result: fairshare.PolicyResult) -> None:
        self.stdout.write(
            f"{policy}: jain {result.jain:.4f}, worst tenant p95 wait "
            f"{result.worst_tenant_wait_p95_s / 3600:.1f} h, GPU allocation "
            f"{100 * result.gpu_allocation:.1f}%, utilization {100 * result.gpu_utilization:.1f}%, "
            f"gangs {result.gangs_started} started / {result.gangs_partially_started} partial, "
            f"{result.preemptions} preemptions, {result.wall_s:.0f} s"
        )
