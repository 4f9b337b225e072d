"""`manage.py experiment NAME`:

- `fairshare`: FIFO against gpusched's fair sharing on the Philly trace
  (bench/experiments/fairshare.py), on the pure core, no database; with `--side database` or
  `--side kubernetes` through the shell's one cycle on a scratch database
  (bench/experiments/fairshare_sides.py);
- `topology`: multi-node gangs without a topology request, with Kueue TAS's required rack
  chosen by its BestFit, and with gpusched's LeastFragmenting choice (`--policies
  no-topology,kueue-tas,gpusched`) on sim/specs/topology.yaml (bench/experiments/topology.py),
  through `--side database` (the
  default) or `--side kubernetes` on a scratch database;
- `overrequest`: request-only scheduling against gpusched's utilization-aware profile and reclaim
  (bench/experiments/overrequest.py), through the simulator, telemetry and scheduling
  workers on a scratch database (the test runner's: created, migrated and dropped again), so the
  configured database is never touched.

    python manage.py experiment fairshare --json
    python manage.py experiment fairshare --days 7 --nodes 64 --policies fifo,gpusched
    python manage.py experiment fairshare --side kubernetes --days 1 --drain-days 1 --nodes 32
    python manage.py experiment overrequest --json --plot docs/img/overrequest.png
    python manage.py experiment topology --side kubernetes --hours 12 --json
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections
from django.test.utils import setup_databases, teardown_databases

from bench.experiments import fairshare, fairshare_sides, overrequest, philly, topology, worlds
from scheduling.core.plugin_args import ProfileError
from scheduling.core.scheduler import Framework
from scheduling.profile_files import load_profile
from sim.spec import SpecError, load_spec

REPO = Path(__file__).resolve().parents[3]
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "philly" / "philly.csv"
EXPERIMENTS = ("fairshare", "overrequest", "topology")


@contextmanager
def scratch_database() -> Iterator[None]:
    """A fresh, migrated database beside the default one for the length of the block (SQLite: a
    temporary file; PostgreSQL: test_<name> on the same server), dropped afterwards."""
    settings_dict = connections["default"].settings_dict
    test_settings = dict(settings_dict.get("TEST") or {})
    with tempfile.TemporaryDirectory(prefix="gpusched-experiment-") as scratch:
        if settings_dict["ENGINE"] == "django.db.backends.sqlite3":
            settings_dict["TEST"] = {**test_settings, "NAME": str(Path(scratch) / "db.sqlite3")}
        old = setup_databases(verbosity=0, interactive=False, aliases={"default": False})
        try:
            yield
        finally:
            teardown_databases(old, verbosity=0)
            settings_dict["TEST"] = test_settings


class Command(BaseCommand):
    help = (
        "Run an experiment: fairshare (FIFO vs fair sharing on Philly), overrequest "
        "(request-only vs utilization-aware scheduling with reclaim) or topology (multi-node "
        "gangs with and without a required rack)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", choices=EXPERIMENTS)
        parser.add_argument("--trace", default=str(DEFAULT_TRACE), help="Philly digest CSV")
        parser.add_argument("--start", default="2017-10-02", help="window start (UTC date)")
        parser.add_argument("--days", type=float, default=7.0, help="window length")
        parser.add_argument("--nodes", type=int, default=64, help="8-GPU servers (P100)")
        parser.add_argument("--step", type=float, default=60.0, help="scheduling grid, seconds")
        parser.add_argument("--drain-days", type=float, default=7.0, help="time to finish after")
        parser.add_argument("--policies", default="", help="comma-separated (default: all)")
        parser.add_argument("--profile", default="topology", help="scheduler profile")
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
        parser.add_argument(
            "--side",
            choices=("core", *worlds.SIDES),
            default=None,
            help="what runs the scheduling: the pure core alone (fairshare's default), or the "
            "shell's one cycle against the embedded simulator (overrequest's default) or the "
            "simulated Kubernetes through the official client",
        )
        over = parser.add_argument_group("overrequest and topology")
        over.add_argument(
            "--spec", default="", help="cluster spec (name or YAML; default: the experiment's)"
        )
        over.add_argument("--hours", type=float, default=8.0, help="simulated hours")
        over.add_argument("--warmup-hours", type=float, default=2.0, help="left out of measures")
        over.add_argument("--plot", default="", help="write a PNG of the comparison here")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["name"] == "overrequest":
            self._overrequest(options)
        elif options["name"] == "topology":
            self._topology(options)
        else:
            self._fairshare(options)

    def _topology(self, options: dict[str, Any]) -> None:
        side = options["side"] or "database"
        if side == "core":
            raise CommandError(
                "--side core: topology runs through the shell (database or kubernetes)"
            )
        try:
            spec = load_spec(options["spec"] or "topology")
        except SpecError as exc:
            raise CommandError(f"--spec: {exc}") from exc
        results: dict[str, Any] = {}
        with scratch_database():
            for policy in self._policies(options, topology.POLICIES):
                results[policy] = topology.simulate(
                    spec, policy, hours=options["hours"], step_s=options["step"], side=side
                ).as_json()
                call_command("flush", interactive=False, verbosity=0)
        doc = {
            "experiment": "topology",
            "side": side,
            "spec": options["spec"] or "topology",
            "hours": options["hours"],
            "step_s": options["step"],
            **results,
        }
        self.stdout.write(json.dumps(doc, indent=2 if options["json"] else None))

    def _policies(self, options: dict[str, Any], known: Sequence[str]) -> list[str]:
        policies = [p.strip() for p in options["policies"].split(",") if p.strip()] or list(known)
        unknown = [p for p in policies if p not in known]
        if unknown:
            raise CommandError(f"--policies: unknown {unknown[0]!r} (known: {', '.join(known)})")
        return policies

    def _overrequest(self, options: dict[str, Any]) -> None:
        options["side"] = options["side"] or "database"
        if options["side"] == "core":
            raise CommandError(
                "--side core: overrequest runs through the shell (database or kubernetes)"
            )
        if not 0 <= options["warmup_hours"] < options["hours"]:
            raise CommandError("--warmup-hours must be at least 0 and less than --hours")
        try:
            spec = load_spec(options["spec"] or "overrequest")
        except SpecError as exc:
            raise CommandError(f"--spec: {exc}") from exc
        policies = self._policies(options, list(overrequest.POLICIES))
        results: dict[str, overrequest.PolicyResult] = {}
        with scratch_database():
            for policy in policies:
                results[policy] = overrequest.simulate(
                    spec,
                    policy,
                    hours=options["hours"],
                    warmup_hours=options["warmup_hours"],
                    step_s=options["step"],
                    side=options["side"],
                    progress=None if options["json"] else self._progress,
                )
                call_command("flush", interactive=False, verbosity=0)
                if not options["json"]:
                    sys.stderr.write("\n")
        doc: dict[str, Any] = {
            "experiment": "overrequest",
            "side": options["side"],
            "spec": options["spec"],
            "hours": options["hours"],
            "warmup_hours": options["warmup_hours"],
            "step_s": options["step"],
            **{policy: result.as_json() for policy, result in results.items()},
        }
        if len(results) == len(overrequest.POLICIES):
            doc.update(overrequest.compare(results, honest_tenant=overrequest.HONEST_TENANT))
        if options["plot"]:
            overrequest.plot(results, options["plot"])
        self.stdout.write(json.dumps(doc, indent=2 if options["json"] else None))

    def _fairshare(self, options: dict[str, Any]) -> None:
        path = Path(options["trace"])
        if not path.is_file():
            raise CommandError(f"--trace: no such file {path}")
        try:
            start = datetime.strptime(options["start"], "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            raise CommandError(f"--start: expected YYYY-MM-DD, got {options['start']!r}") from None
        policies = self._policies(options, philly.POLICIES)
        try:
            profile = load_profile(options["profile"])
        except ProfileError as exc:
            raise CommandError(str(exc)) from exc
        trace = philly.load_trace(path, start=start, days=options["days"])
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
        side = options["side"] or "core"
        doc["side"] = side
        for policy in policies:
            progress = None if options["json"] else self._progress
            if side == "core":
                result = fairshare.simulate(
                    trace,
                    policy,
                    Framework(profile),
                    nodes=options["nodes"],
                    step_s=options["step"],
                    drain_days=options["drain_days"],
                    progress=progress,
                )
            else:
                with scratch_database():
                    result = fairshare_sides.simulate(
                        trace,
                        policy,
                        Framework(profile),
                        side=side,
                        nodes=options["nodes"],
                        step_s=options["step"],
                        drain_days=options["drain_days"],
                        progress=progress,
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
