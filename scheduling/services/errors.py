"""Errors services raise for requests the state does not allow."""

from __future__ import annotations


class ServiceError(Exception):
    """A request the state does not allow; the message says why (shown to API clients)."""
