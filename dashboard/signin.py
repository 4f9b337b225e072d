"""Throttled sign-in for the dashboard and the admin: guessing passwords costs time.

Failed sign-ins are counted per username and per client address in the default cache (Redis in
production, shared by every web replica), each in a window that starts with its first failure:

    per username   SIGNIN_MAX_FAILURES_PER_USER (10) failures per SIGNIN_WINDOW_SECONDS (900)
    per address    SIGNIN_MAX_FAILURES_PER_ADDRESS (30) in the same window

Past either, every attempt of that username or from that address is refused, the right password
included, with a message saying when to try again, and the page answers 429. A success clears
its username's count. The address is REMOTE_ADDR: behind a proxy every client shares the
proxy's, so the per-username limit is the one that holds there. Locking a username out is what a
guesser can do to an admin on purpose; the window bounds it (docs/security.md). While the cache
is down sign-in is not throttled (and that is logged), as with the API's throttle.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm
from django.core.cache import cache
from django.http import HttpRequest, HttpResponseBase

logger = logging.getLogger(__name__)

DEFAULTS = {
    "SIGNIN_MAX_FAILURES_PER_USER": 10,
    "SIGNIN_MAX_FAILURES_PER_ADDRESS": 30,
    "SIGNIN_WINDOW_SECONDS": 900,
}


def _setting(name: str) -> int:
    return int(getattr(settings, name, DEFAULTS[name]))


def _keys(request: HttpRequest | None, username: str) -> list[tuple[str, int]]:
    """The counters an attempt is charged to, with their limits."""
    digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()[:32]
    keys = [(f"signin:user:{digest}", _setting("SIGNIN_MAX_FAILURES_PER_USER"))]
    address = request.META.get("REMOTE_ADDR", "") if request is not None else ""
    if address:
        keys.append((f"signin:addr:{address}", _setting("SIGNIN_MAX_FAILURES_PER_ADDRESS")))
    return keys


def locked_for(request: HttpRequest | None, username: str) -> int:
    """Seconds until this username or address may try again (0: now)."""
    now = time.time()
    wait = 0.0
    for key, limit in _keys(request, username):
        failures = cache.get(key, 0)
        started = cache.get(f"{key}:since", now)
        if failures >= limit:
            wait = max(wait, started + _setting("SIGNIN_WINDOW_SECONDS") - now)
    return max(int(wait + 0.999), 0)


def record_failure(request: HttpRequest | None, username: str) -> None:
    window = _setting("SIGNIN_WINDOW_SECONDS")
    for key, _ in _keys(request, username):
        if cache.add(key, 1, timeout=window):
            cache.set(f"{key}:since", time.time(), timeout=window)
        else:
            try:
                cache.incr(key)
            except ValueError:  # expired between add() and incr()
                cache.add(key, 1, timeout=window)


def record_success(username: str) -> None:
    key, _ = _keys(None, username)[0]
    cache.delete_many([key, f"{key}:since"])


class ThrottledSignIn:
    """Mixed into Django's sign-in forms: refuses while locked, counts failures."""

    request: HttpRequest | None
    throttled_message = "Too many failed sign-ins for this user or address: try again in {wait}."

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", ""))  # type: ignore[attr-defined]
        try:
            wait = locked_for(self.request, username)
        except Exception as exc:  # the cache (Redis) away: not throttled, said so
            logger.warning("sign-in throttle unavailable (%s): not throttled", exc)
            return super().clean()  # type: ignore[misc]
        if wait:
            if self.request is not None:
                self.request.signin_throttled = True  # type: ignore[attr-defined]
            minutes = (wait + 59) // 60
            raise forms.ValidationError(
                self.throttled_message.format(wait=f"{minutes} minute{'s' if minutes > 1 else ''}"),
                code="throttled",
            )
        try:
            cleaned: dict[str, Any] = super().clean()  # type: ignore[misc]
        except forms.ValidationError:
            _safely(record_failure, self.request, username)
            raise
        _safely(record_success, username)
        return cleaned


def _safely(action: Callable[..., None], *args: Any) -> None:
    try:
        action(*args)
    except Exception as exc:
        logger.warning("sign-in throttle unavailable (%s): not counted", exc)


class SignInForm(ThrottledSignIn, AuthenticationForm):
    pass


class AdminSignInForm(ThrottledSignIn, AdminAuthenticationForm):
    pass


View = Callable[..., HttpResponseBase]


def answers_429_when_throttled(view: View) -> View:
    """The sign-in page, with status 429 Too Many Requests while the attempt was refused."""

    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        if getattr(request, "signin_throttled", False):
            response.status_code = 429
        return response

    return wrapper
