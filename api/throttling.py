"""Rate limits per caller (tenant token, admin user, or client address when anonymous).

Rates are read from settings on every request (REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"], set from
the environment in gpusched/settings.py), so they can be changed without re-importing DRF.

The counters live in the default cache (Redis in production). While Redis is down the throttle
lets requests through (and logs it, at most once a minute): the API keeps serving, unthrottled,
rather than failing every request."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

import redis
from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import SimpleRateThrottle

from api.authentication import TenantPrincipal

logger = logging.getLogger(__name__)

WARN_EVERY_S = 60.0
_warned_at = -WARN_EVERY_S


def _identity(throttle: SimpleRateThrottle, request: Request) -> str:
    user: Any = request.user
    if isinstance(user, TenantPrincipal):
        return f"tenant:{user.tenant.pk}"
    if user is not None and user.is_authenticated:
        return f"user:{user.pk}"
    return f"anon:{throttle.get_ident(request)}"


class PrincipalRateThrottle(SimpleRateThrottle):
    """Every request: `api` rate for authenticated callers, `anon` rate otherwise."""

    scope = "api"

    def get_rate(self) -> str | None:
        config: Mapping[str, Any] = settings.REST_FRAMEWORK
        rates: Mapping[str, str | None] = config["DEFAULT_THROTTLE_RATES"]
        return rates.get(self.scope)

    def allow_request(self, request: Request, view: Any) -> bool:
        user: Any = request.user
        authenticated = user is not None and user.is_authenticated
        self.scope = type(self).scope if authenticated else "anon"
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except redis.RedisError as exc:
            _warn_unthrottled(exc)
            return True

    def get_cache_key(self, request: Request, view: Any) -> str:
        return self.cache_format % {"scope": self.scope, "ident": _identity(self, request)}


class RefusedCallerThrottle(PrincipalRateThrottle):
    """Requests refused for their credentials (none, or a bad token), counted at the `anon` rate
    per client address. DRF authenticates and checks permissions before it throttles, so these
    never reached PrincipalRateThrottle: a client guessing tokens was never slowed down."""

    scope = "anon"

    def allow_request(self, request: Request, view: Any) -> bool:
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return SimpleRateThrottle.allow_request(self, request, view)
        except redis.RedisError as exc:
            _warn_unthrottled(exc)
            return True

    def get_cache_key(self, request: Request, view: Any) -> str:
        return self.cache_format % {"scope": "anon", "ident": f"anon:{self.get_ident(request)}"}


class SubmitRateThrottle(PrincipalRateThrottle):
    """Workload submits, on top of the general rate."""

    scope = "submit"


def _warn_unthrottled(exc: Exception) -> None:
    global _warned_at
    now = time.monotonic()
    if now - _warned_at >= WARN_EVERY_S:
        _warned_at = now
        logger.warning("API throttle counters unavailable (%s): requests are not throttled", exc)
