"""`manage.py runscheduler [--once | --loop]`: the scheduling worker.

One active scheduler at a time (a lease row in the database); standbys keep trying and take over
when the leader's lease expires. SIGTERM/SIGINT finish the current cycle, give up the lease and
exit."""

from __future__ import annotations

import json
import signal
import time
from dataclasses import asdict
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from scheduling.core.scheduler import Framework
from scheduling.profile_files import load_profile
from scheduling.worker import LEASE_NAME, SchedulerWorker


class Command(BaseCommand):
    help = "Run the scheduling loop (one cycle by default, --loop to keep going)."

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="one cycle, then exit (default)")
        mode.add_argument("--loop", action="store_true", help="run until SIGTERM")
        parser.add_argument("--profile", default="gpusched", help="profile name or YAML path")
        parser.add_argument("--batch", type=int, default=500, help="pods per cycle")
        parser.add_argument(
            "--interval", type=float, default=0.5, help="idle sleep between cycles (s)"
        )
        parser.add_argument("--lease-seconds", type=float, default=15.0)
        parser.add_argument(
            "--lease-name", default=LEASE_NAME, help="schedulers sharing it elect one leader"
        )
        parser.add_argument(
            "--identity", default="", help="lease holder id (default: host_pid_random)"
        )
        parser.add_argument(
            "--json", action="store_true", help="print one JSON line per busy cycle"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.shutdown = False
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        worker = SchedulerWorker(
            Framework(load_profile(options["profile"])),
            batch_size=options["batch"],
            lease_duration_s=options["lease_seconds"],
            lease_name=options["lease_name"],
        )
        if options["identity"]:
            worker.identity = options["identity"]
        self.stderr.write(f"runscheduler: {worker.identity} starting")
        try:
            while True:
                report = worker.run_once()
                if options["json"] and (report.attempted or report.admitted or report.reconciled):
                    self.stdout.write(json.dumps(asdict(report)))
                if not options["loop"] or self.shutdown:
                    break
                if not report.more:
                    self._sleep(
                        options["interval"] if report.leading else options["lease_seconds"] / 3
                    )
        finally:
            worker.stand_down()
            self.stderr.write(f"runscheduler: {worker.identity} stopped")

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.shutdown and time.monotonic() < deadline:
            time.sleep(min(0.1, seconds))

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.shutdown = True
