"""Prometheus metrics of one gpusched process role, and the endpoint worker commands serve them on.

Each role (web, scheduler, ingester) keeps its own registry instead of prometheus_client's global
one: a process that imports another role's module (the test process imports them all) would
otherwise export that role's families too, as zeros that look like real readings.
"""

from __future__ import annotations

from socketserver import BaseServer
from wsgiref.simple_server import WSGIServer

from django.core.management.base import CommandParser
from prometheus_client import (
    CollectorRegistry,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
    start_http_server,
)


def role_registry() -> CollectorRegistry:
    """A registry with the standard process families (CPU, memory, file descriptors, GC)."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return registry


def add_metrics_arguments(parser: CommandParser) -> None:
    parser.add_argument(
        "--metrics-host", default="127.0.0.1", help="address of the Prometheus /metrics endpoint"
    )
    parser.add_argument(
        "--metrics-port", type=int, default=0, help="port of /metrics (0: not served)"
    )


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> WSGIServer | None:
    """Serve `registry` on http://host:port/metrics from a daemon thread; None when port is 0.
    The caller shuts the returned server down when the command ends."""
    if not port:
        return None
    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server


def stop_serving(server: BaseServer | None) -> None:
    if server is not None:
        server.shutdown()
        server.server_close()
