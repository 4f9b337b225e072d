"""The web process's Prometheus metrics, served on /metrics (gpusched/views.py).

Cluster-wide numbers are read from the database at scrape time by each app's collector
(scheduling/web_metrics.py, dashboard/web_metrics.py, telemetry/web_metrics.py), so every web
replica reports the same cluster and nothing has to be kept in step. They are aggregates only
(counts per cluster queue, phase, state or telemetry source, and each tenant's usage): tenant and
queue names, no workload or node names. Reading them costs a scan of the cluster, so the
exposition is served from `exposition`, at most METRICS_CACHE_S old; the view asks for
METRICS_TOKEN when one is set (gpusched/views.py).
`DatabaseCollector` reads them all or none: a scrape that fails half-way reports the database
down (`gpusched_database_up` 0), not a mix.

Request latency is this process's (`request_metrics`, the first middleware): per route, the URL
pattern a request matched (`static` for collected files, `unmatched` for unknown paths), so the
label has as many values as the URL configuration has patterns, never one per object.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from django.conf import settings
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponseBase
from prometheus_client import Counter as CounterMetric
from prometheus_client import Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from common.process_metrics import role_registry
from dashboard.web_metrics import OutboxCollector, StrandedCollector, websocket_clients
from scheduling.web_metrics import SchedulingCollector
from telemetry.web_metrics import TelemetryCollector

logger = logging.getLogger(__name__)


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class DatabaseCollector:
    """The apps' scrape-time collectors, all or nothing: a scrape that fails half-way reports the
    database down, not a mix."""

    def __init__(self, *collectors: Collector) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        try:
            families = [family for c in self.collectors for family in c.collect()]
        except DatabaseError:
            logger.warning("/metrics: reading the database failed", exc_info=True)
            families = []
        yield GaugeMetricFamily(
            "gpusched_database_up",
            "1 if /metrics could read the database (0: the other cluster families are missing).",
            value=1 if families else 0,
        )
        yield from families


registry = role_registry()
registry.register(
    DatabaseCollector(
        SchedulingCollector(), OutboxCollector(), StrandedCollector(), TelemetryCollector()
    )
)
registry.register(websocket_clients)


class CachedExposition:
    """The last rendered exposition, rendered again once it is older than the age asked for.
    Scrapes arriving while one renders wait for it and are served its result: concurrent scrapes
    read the database once."""

    def __init__(
        self, render: Callable[[], bytes], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._render = render
        self._clock = clock
        self._lock = threading.Lock()
        self._body = b""
        self._rendered_at: float | None = None

    def get(self, max_age_s: float) -> bytes:
        with self._lock:
            rendered_at = self._rendered_at
            if rendered_at is None or self._clock() - rendered_at >= max_age_s:
                self._body = self._render()
                self._rendered_at = self._clock()
            return self._body


exposition = CachedExposition(lambda: generate_latest(registry))

http_request_seconds = Histogram(
    "gpusched_http_request_duration_seconds",
    "Web requests from the first middleware to the response, by route (the URL pattern).",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=registry,
)
http_requests = CounterMetric(
    "gpusched_http_requests",
    "Web requests by route, method and status code.",
    ["route", "method", "code"],
    registry=registry,
)

Handler = Callable[[HttpRequest], HttpResponseBase]


def route_of(request: HttpRequest) -> str:
    match = request.resolver_match
    if match is not None:
        return match.route or match.view_name
    return "static" if request.path.lstrip("/").startswith(settings.STATIC_URL) else "unmatched"


# Any token is a method to HTTP: the label keeps the standard ones, so a client cannot grow it.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _observe(request: HttpRequest, response: HttpResponseBase, seconds: float) -> None:
    route = route_of(request)
    method = request.method if request.method in METHODS else "other"
    http_request_seconds.labels(route=route).observe(seconds)
    http_requests.labels(route=route, method=method, code=str(response.status_code)).inc()


def request_metrics(get_response: Handler) -> Handler:
    """Times every request (the chain runs on the request's thread: gpusched/request_handler.py)."""

    def timed(request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = get_response(request)
        _observe(request, response, time.perf_counter() - started)
        return response

    return timed
