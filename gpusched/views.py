"""Probes and metrics for whatever runs the web process (Kubernetes, compose, Prometheus).

/healthz is liveness: the process answers, whatever the state of its dependencies (restarting it
would not bring the database back). /readyz is readiness: send it traffic only once the database
answers and its migrations are all applied. Without the channel layer's Redis the web still serves
pages and the API and live updates resume when Redis returns (tests/faults/test_redis_down.py), so
that check only marks the answer "degraded": taking every replica out of service for it would turn
a Redis outage into a whole outage. Error details go to the log; the bodies name the failed check
and the exception class.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

import redis
from django.conf import settings
from django.db import DatabaseError, connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import CONTENT_TYPE_LATEST

from gpusched import web_metrics

logger = logging.getLogger(__name__)

REDIS_TIMEOUT_S = 2.0
NOT_CHECKED = "not checked: the database is unavailable"


@never_cache
@require_safe
def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness: the process answers."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_safe
def readyz(request: HttpRequest) -> JsonResponse:
    """Readiness: 503 naming the failed checks, else 200 ("degraded" without the channel layer)."""
    checks = {"database": _database()}
    checks["migrations"] = _migrations() if checks["database"] == "ok" else NOT_CHECKED
    checks["channel_layer"] = _channel_layer()
    if settings.WEB_EXTENDER:
        checks["extender"] = _extender()
    failed = [name for name, result in checks.items() if result not in ("ok", NOT_CHECKED)]
    if set(failed) - {"channel_layer"}:
        return JsonResponse(
            {"status": "unavailable", "failed": failed, "checks": checks}, status=503
        )
    status = "degraded" if failed else "ok"
    return JsonResponse({"status": status, "failed": failed, "checks": checks})


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition of the web process (gpusched/web_metrics.py), at most
    METRICS_CACHE_S old; only for `Authorization: Bearer <METRICS_TOKEN>` when that is set."""
    if settings.METRICS_TOKEN and not _bears(request, settings.METRICS_TOKEN):
        response = HttpResponse(
            "/metrics needs the metrics token: Authorization: Bearer <token>.\n",
            status=401,
            content_type="text/plain; charset=utf-8",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    body = web_metrics.exposition.get(max_age_s=settings.METRICS_CACHE_S)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


def _bears(request: HttpRequest, token: str) -> bool:
    scheme, _, presented = request.headers.get("Authorization", "").partition(" ")
    # Compared in constant time: how long a wrong guess took says nothing of the token.
    return scheme.lower() == "bearer" and hmac.compare_digest(
        presented.strip().encode(), token.encode()
    )


def _database() -> str:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        logger.warning("readyz: database unavailable: %s", exc)
        return f"unavailable ({type(exc).__name__})"
    return "ok"


def _migrations() -> str:
    """A process newer than its database schema must not take traffic: `migrate` runs first."""
    try:
        executor = MigrationExecutor(connection)
        plan = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except DatabaseError as exc:
        logger.warning("readyz: reading applied migrations failed: %s", exc)
        return f"unavailable ({type(exc).__name__})"
    if plan:
        first, _backwards = plan[0]
        return f"{len(plan)} unapplied, first {first.app_label}.{first.name}"
    return "ok"


def _extender() -> str:
    """The web process's extender routes (GPUSCHED_WEB_EXTENDER): built at start
    (gpusched/asgi.py); a bad profile keeps the process out of service instead of answering
    kube-scheduler with 503s."""
    from kube import extender

    return extender.load() or "ok"


def _channel_layer() -> str:
    """With channels-redis, every Redis the layer uses must answer a PING; the in-memory layer
    (one process, no Redis) is always ready."""
    layer: dict[str, Any] = settings.CHANNEL_LAYERS.get("default", {})
    if not layer.get("BACKEND", "").startswith("channels_redis."):
        return "ok"
    for host in layer.get("CONFIG", {}).get("hosts", []):
        address = host["address"] if isinstance(host, dict) else host
        try:
            with redis.Redis.from_url(
                address, socket_connect_timeout=REDIS_TIMEOUT_S, socket_timeout=REDIS_TIMEOUT_S
            ) as client:
                client.ping()
        except redis.RedisError as exc:
            logger.warning("readyz: channel layer Redis unavailable: %s", exc)
            return f"unavailable ({type(exc).__name__})"
    return "ok"
