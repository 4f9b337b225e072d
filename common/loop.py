"""The shape every worker command shares (healthchecks' sendalerts): one step by default, `--loop`
to keep going, a short sleep when a step found nothing to do, and SIGTERM/SIGINT finishing the
current step before exiting.

With --loop, a step that fails does not end the worker (controllers requeue with backoff rather
than exit): the error is logged with its traceback, every database connection of the process is
closed so the next step opens a fresh one (the server restarted, a failover, a dropped connection),
and the next step comes after a backoff (0.5 s, doubling up to `max_backoff`). With --once the
error is raised as it is. A CommandError is the command deciding to end (a scheduler that lost its
lease): it ends the loop in both modes.

The loop keeps `health` (common/process_metrics.py) up to date for the probes: liveness fails once
a step or a wait overruns by `--stuck-intervals` intervals, readiness follows the last step."""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from common.process_metrics import LoopHealth, register_health

logger = logging.getLogger(__name__)


class LoopCommand(BaseCommand):
    default_interval = 1.0
    interval = default_interval
    # Liveness fails after this many intervals past due; each role sets it so the budget covers
    # its slowest healthy step (a 5,000-node resync takes 2.6-4.3 s here: docs/benchmarks.md).
    default_stuck_intervals = 60
    max_backoff = 5.0  # seconds between steps while they keep failing
    failed_steps = 0  # over the life of the command

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.health = LoopHealth(stuck_after_s=self.default_stuck_intervals * self.default_interval)

    def add_loop_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="one step, then exit (default)")
        mode.add_argument("--loop", action="store_true", help="keep going until SIGTERM")
        parser.add_argument(
            "--interval", type=float, default=self.default_interval, help="idle sleep (seconds)"
        )
        parser.add_argument(
            "--stuck-intervals",
            type=float,
            default=self.default_stuck_intervals,
            help="/healthz fails once the loop is this many intervals past due",
        )

    def configure_loop(self, options: dict[str, Any]) -> None:
        """Take --interval and --stuck-intervals."""
        self.interval = options["interval"]
        self.health.stuck_after_s = options["stuck_intervals"] * self.interval

    def run_loop(self, step: Callable[[], float | None], *, loop: bool) -> None:
        """Call `step` until stopped. It returns how long to wait before the next step (None: the
        --interval); 0 means more work is waiting."""
        self.shutdown = False
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        backoff = 0.0
        register_health(self.health)
        try:
            while True:
                self.health.step_started()
                try:
                    wait = step()
                    backoff = 0.0
                    self.health.step_finished(self.interval if wait is None else wait)
                except CommandError:
                    raise
                except Exception as error:
                    if not loop:
                        raise
                    backoff = min(max(backoff * 2, 0.5), self.max_backoff)
                    self.failed_steps += 1
                    logger.warning(
                        "%s: step failed; next try in %.1f s",
                        type(self).__module__.rpartition(".")[2],
                        backoff,
                        exc_info=True,
                    )
                    _close_connections()
                    wait = backoff
                    self.health.step_failed(error, wait)
                if not loop or self.shutdown:
                    return
                self.sleep(self.interval if wait is None else wait)
        finally:
            register_health(None)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.shutdown and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.shutdown = True


def _close_connections() -> None:
    """Drop this thread's database connections (a broken one may fail to close: that is fine)."""
    for connection in connections.all(initialized_only=True):
        try:
            connection.close()
        except Exception:
            logger.debug("closing a broken database connection failed", exc_info=True)
