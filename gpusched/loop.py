"""The shape every worker command shares (healthchecks' sendalerts): one step by default, `--loop`
to keep going, a short sleep when a step found nothing to do, and SIGTERM/SIGINT finishing the
current step before exiting."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from types import FrameType

from django.core.management.base import BaseCommand, CommandParser


class LoopCommand(BaseCommand):
    default_interval = 1.0
    interval = default_interval

    def add_loop_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group()
        mode.add_argument("--once", action="store_true", help="one step, then exit (default)")
        mode.add_argument("--loop", action="store_true", help="keep going until SIGTERM")
        parser.add_argument(
            "--interval", type=float, default=self.default_interval, help="idle sleep (seconds)"
        )

    def run_loop(self, step: Callable[[], float | None], *, loop: bool) -> None:
        """Call `step` until stopped. It returns how long to wait before the next step (None: the
        --interval); 0 means more work is waiting."""
        self.shutdown = False
        previous = {sig: signal.signal(sig, self._stop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            while True:
                wait = step()
                if not loop or self.shutdown:
                    return
                self.sleep(self.interval if wait is None else wait)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self.shutdown and time.monotonic() < deadline:
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    def _stop(self, signum: int, frame: FrameType | None) -> None:
        self.shutdown = True
