"""Waiting on a condition instead of sleeping a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], *, timeout: float, what: str = "") -> None:
    """Poll `condition` until it is truthy; AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what or 'condition'} not met within {timeout} s"
        time.sleep(0.02)
