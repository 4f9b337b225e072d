"""`manage.py runscheduler [--once | --loop]`: the scheduling worker.

One active scheduler at a time (a lease row in the database); standbys keep trying and take over
when the leader's lease expires. SIGTERM/SIGINT finish the current cycle, give up the lease and
exit.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser

from gpusched.loop import LoopCommand
from scheduling.core.scheduler import Framework
from scheduling.profile_files import load_profile
from scheduling.worker import LEASE_NAME, SchedulerWorker


class Command(LoopCommand):
    help = "Run the scheduling loop (one cycle by default, --loop to keep going)."
    default_interval = 0.5

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_loop_arguments(parser)
        parser.add_argument("--profile", default="gpusched", help="profile name or YAML path")
        parser.add_argument("--batch", type=int, default=500, help="pods per cycle")
        parser.add_argument("--lease-seconds", type=float, default=15.0)
        parser.add_argument(
            "--lease-name", default=LEASE_NAME, help="schedulers sharing it elect one leader"
        )
        parser.add_argument(
            "--identity", default="", help="lease holder id (default: host_pid_rnd)"
        )
        parser.add_argument("--json", action="store_true", help="one JSON line per busy cycle")

    def handle(self, *args: Any, **options: Any) -> None:
        self.interval = options["interval"]
        worker = SchedulerWorker(
            Framework(load_profile(options["profile"])),
            batch_size=options["batch"],
            lease_duration_s=options["lease_seconds"],
            lease_name=options["lease_name"],
        )
        if options["identity"]:
            worker.identity = options["identity"]
        self.stderr.write(f"runscheduler: {worker.identity} starting")

        def step() -> float | None:
            report = worker.run_once()
            if options["json"] and (report.attempted or report.admitted or report.reconciled):
                self.stdout.write(json.dumps(asdict(report)))
            if not report.leading:  # a standby retries well within the lease duration
                return options["lease_seconds"] / 3
            return 0.0 if report.more else None

        try:
            self.run_loop(step, loop=options["loop"])
        finally:
            worker.stand_down()
            self.stderr.write(f"runscheduler: {worker.identity} stopped")
