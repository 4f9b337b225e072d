"""Prometheus metrics of one gpusched process role, and the endpoint worker commands serve them on,
with the probes beside them: `--metrics-port N` serves /metrics, /healthz and /readyz on N.

Each role (web, scheduler, ingester, extender) keeps its own registry instead of
prometheus_client's global one: a process that imports another role's module (the test process
imports them all) would otherwise export that role's families too, as zeros that look like real
readings.

/healthz is liveness: the worker's loop is turning. The loop (common/loop.py) tells `LoopHealth`
when a step starts and when it ends with the wait it chose; the probe fails once the loop is more
than `stuck_after_s` past the moment it should have moved on (a step running that long, or a wait
overrun), so a process wedged on a lock or a hung connection is restarted. /readyz is readiness: the
last step finished (for the scheduler: leading, or standing by with the database answering; for the
ingester: its last cycle finished), naming what the step said of itself or the error it ended on.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from django.core.management.base import CommandParser
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def role_registry() -> CollectorRegistry:
    """A registry with the standard process families (CPU, memory, file descriptors, GC)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


@dataclass
class LoopHealth:
    """What a worker's /healthz and /readyz answer, kept up to date by its loop. Thread-safe: the
    loop writes, the probe server's threads read."""

    stuck_after_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    # What the step says of itself, shown by /readyz ("leading", "standing by"); set by the step.
    state: str = ""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _deadline: float | None = None  # None: the loop has not started; start-up is one long step
    _started: float = 0.0
    _ready: bool = False
    _reason: str = "starting: no step has finished yet"

    def __post_init__(self) -> None:
        self._started = self.clock()

    def step_started(self) -> None:
        with self._lock:
            self._deadline = self.clock() + self.stuck_after_s

    def progress(self) -> None:
        """A long step is still making progress (a phase finished one of its bounded pieces):
        the step's stuck budget starts again, so liveness fails a loop that stopped, never one
        that is slow because it has much to do."""
        self.step_started()

    def step_finished(self, wait: float) -> None:
        with self._lock:
            self._deadline = self.clock() + wait + self.stuck_after_s
            self._ready, self._reason = True, self.state or "ok"

    def step_failed(self, error: BaseException, wait: float) -> None:
        with self._lock:
            self._deadline = self.clock() + wait + self.stuck_after_s
            self._ready = False
            self._reason = f"the last step failed: {type(error).__name__}: {error}"[:300]

    def liveness(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            deadline = self._deadline
            if deadline is None:
                deadline = self._started + self.stuck_after_s
            overdue = self.clock() - deadline
        if overdue > 0:
            return False, {
                "status": "stuck",
                "overdue_s": round(overdue, 3),
                "stuck_after_s": self.stuck_after_s,
            }
        return True, {"status": "ok"}

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        with self._lock:
            ready, reason = self._ready, self._reason
        return ready, {"status": "ready" if ready else "unready", "state": reason}


def add_metrics_arguments(parser: CommandParser) -> None:
    parser.add_argument(
        "--metrics-host",
        default=os.environ.get("GPUSCHED_METRICS_HOST", "127.0.0.1"),
        help="address of /metrics, /healthz and /readyz (env GPUSCHED_METRICS_HOST)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,  # argparse converts the environment's string too: a bad one is a usage error
        default=os.environ.get("GPUSCHED_METRICS_PORT", "0"),
        help="their port; 0: not served (env GPUSCHED_METRICS_PORT)",
    )


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Probes and scrapes every few seconds would flood the log."""


def probes_app(registry: CollectorRegistry, health: LoopHealth) -> Callable[..., Iterable[bytes]]:
    """WSGI: /healthz and /readyz from `health` (JSON, 200 or 503), everything else the metrics
    exposition of prometheus_client (content negotiation and gzip included)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        probe = {"/healthz": health.liveness, "/readyz": health.readiness}.get(
            environ.get("PATH_INFO", "")
        )
        if probe is None:
            return metrics(environ, start_response)
        ok, body = probe()
        data = json.dumps(body).encode()
        start_response(
            "200 OK" if ok else "503 Service Unavailable",
            [("Content-Type", "application/json"), ("Content-Length", str(len(data)))],
        )
        return [data]

    return app


def serve_metrics(
    registry: CollectorRegistry, health: LoopHealth, host: str, port: int
) -> WSGIServer | None:
    """Serve /metrics, /healthz and /readyz on http://host:port from a daemon thread; None when
    port is 0. The caller shuts the returned server down when the command ends."""
    if not port:
        return None
    server = make_server(
        host, port, probes_app(registry, health), ThreadingWSGIServer, handler_class=_QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return server


def stop_serving(server: WSGIServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()


# The loop health of this process's worker loop, if one runs (common/loop.py registers it): the
# phases that may run long (evicting thousands of pods) report progress through `heartbeat`
# without being handed the command.
_current_health: LoopHealth | None = None


def register_health(health: LoopHealth | None) -> None:
    global _current_health
    _current_health = health


def heartbeat() -> None:
    """Tell the process's loop health that the current step is still making progress."""
    health = _current_health
    if health is not None:
        health.progress()
