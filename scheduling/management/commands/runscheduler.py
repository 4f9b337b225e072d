"""`manage.py runscheduler [--once | --loop]`: the scheduling cycle on the database side.

One active scheduler at a time (a lease row in the database); standbys keep trying and take over
when the leader's lease expires. SIGTERM/SIGINT finish the current cycle, give up the lease and
exit. With --metrics-port, Prometheus metrics (scheduling/worker/metrics.py) are served on that port
with /healthz (the loop turns) and /readyz (the last cycle finished: leading or standing by).
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

from django.core.management.base import CommandParser
from django.db import DatabaseError

from common.loop import LoopCommand
from common.process_metrics import add_metrics_arguments, serve_metrics, stop_serving
from common.schema import require_migrated
from scheduling.core.scheduler import Framework
from scheduling.profile_files import DEFAULT, command_profile
from scheduling.worker import metrics
from scheduling.worker.cache import ClusterCache
from scheduling.worker.cycle import CycleReport
from scheduling.worker.database_side import LEASE_NAME, database_cycle

logger = logging.getLogger(__name__)
cycle_logger = logging.getLogger("scheduling.worker.cycle")  # one line per busy cycle


class Command(LoopCommand):
    help = "Run the scheduling loop (one cycle by default, --loop to keep going)."
    default_interval = 0.5

    def add_arguments(self, parser: CommandParser) -> None:
        self.add_loop_arguments(parser)
        parser.add_argument("--profile", default=DEFAULT, help="profile name or YAML path")
        parser.add_argument("--batch", type=int, default=500, help="pods per cycle")
        parser.add_argument("--lease-seconds", type=float, default=15.0)
        parser.add_argument(
            "--lease-name", default=LEASE_NAME, help="schedulers sharing it elect one leader"
        )
        parser.add_argument(
            "--identity", default="", help="lease holder id (default: host_pid_rnd)"
        )
        parser.add_argument("--json", action="store_true", help="one JSON line per busy cycle")
        add_metrics_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        self.configure_loop(options)
        require_migrated()
        worker = database_cycle(
            Framework(command_profile(options["profile"])),
            identity=options["identity"],
            batch_size=options["batch"],
            lease_duration_s=options["lease_seconds"],
            lease_name=options["lease_name"],
            cache=ClusterCache(freeze_long_lived=True),
        )
        logger.info("runscheduler: %s starting", worker.identity)
        server = serve_metrics(
            metrics.registry, self.health, options["metrics_host"], options["metrics_port"]
        )

        def step() -> float | None:
            report = worker.run_once()
            metrics.record_cycle(report)
            self.health.state = "leading" if report.leading else "standing by"
            if metrics.is_busy(report):
                log_cycle(report)
                if options["json"]:
                    self.stdout.write(json.dumps(asdict(report)))
            if not report.leading:  # a standby retries well within the lease duration
                return options["lease_seconds"] / 3
            return 0.0 if report.more else None

        try:
            self.run_loop(step, loop=options["loop"])
        finally:
            try:
                worker.stand_down()
            except DatabaseError as exc:  # the lease then simply expires
                logger.warning("runscheduler: could not give up the lease: %s", exc)
            stop_serving(server)
            logger.info("runscheduler: %s stopped", worker.identity)


def log_cycle(report: CycleReport) -> None:
    """One line per busy cycle; every number of the report is also an `extra` field (a key of
    its own in GPUSCHED_LOG_FORMAT=json)."""
    cycle_logger.info(
        "cycle: %d pods attempted, %d bound, %d unschedulable, %d conflicts; %d workloads "
        "admitted, %d preempted; %.3f s",
        report.attempted,
        report.bound,
        report.unschedulable,
        report.conflicts,
        report.admitted,
        report.preempted,
        sum(report.phase_seconds().values()),
        extra=asdict(report),
    )
