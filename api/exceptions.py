"""One error shape for the whole API: `{"message": str, "extra": {...}}` (HackSoft styleguide).

Bad input gets `extra.fields`, mapping each offending field, as a path into the request
(`podSets[0].template.resources.requests.nvidia.com/gpu`), to its messages, with one of two codes:

- 400: the request breaks the OpenAPI schema (a wrong type, an unknown key, a name or map over
  its size limit, a quantity not in Kubernetes' grammar); the schema says exactly what passes;
- 422 (`InvalidInput`): the request is well formed but refused for what it names or asks (an
  unknown queue, more GPUs than any node has, a quantity beyond any cluster, minCount > count).

Services raise `ApplicationError` subclasses; DRF's own exceptions (authentication, permission,
throttling, parse errors, 404) are reshaped here, keeping their status codes and headers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db import InterfaceError, OperationalError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)

INVALID_INPUT = "Invalid input."
# The code of a field's error that refuses a well-formed value for what it asks (a quantity
# beyond any cluster found while a pod spec is read): a 422 when every error of a request has it.
REFUSED = "refused"
DATABASE_RETRY_AFTER_S = 5


class ApplicationError(Exception):
    """A refused request; `status_code` says how, `extra` carries machine-readable detail."""

    status_code: int = status.HTTP_400_BAD_REQUEST

    def __init__(self, message: str, extra: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.extra: dict[str, Any] = dict(extra or {})


class InvalidInput(ApplicationError):
    """422 with field-level messages: `fields` maps a path into the request to its messages."""

    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY

    def __init__(self, fields: Mapping[str, list[str]], message: str | None = None) -> None:
        super().__init__(
            message or _message(fields), {"fields": {k: list(v) for k, v in fields.items()}}
        )
        self.fields = dict(fields)

    @classmethod
    def one(cls, path: str, message: str) -> InvalidInput:
        return cls({path: [message]}, f"{path}: {message}")


class NotFound(ApplicationError):
    status_code = status.HTTP_404_NOT_FOUND


class Conflict(ApplicationError):
    status_code = status.HTTP_409_CONFLICT


class Forbidden(ApplicationError):
    status_code = status.HTTP_403_FORBIDDEN


class Unprocessable(ApplicationError):
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested error structure as {"a.b[0].c": ["message", ...]}."""
    out: dict[str, list[str]] = {}
    if isinstance(detail, Mapping):
        for key, value in detail.items():
            if key == "non_field_errors":
                path = prefix or "body"
            elif isinstance(key, int):  # ListField: {index: errors}
                path = f"{prefix}[{key}]"
            else:
                path = f"{prefix}.{key}" if prefix else str(key)
            for sub, messages in flatten_errors(value, path).items():
                out.setdefault(sub, []).extend(messages)
    elif isinstance(detail, list | tuple):
        if all(not isinstance(item, Mapping | list | tuple) for item in detail):
            out[prefix or "body"] = [str(item) for item in detail]
        else:
            for index, item in enumerate(detail):
                if not item:
                    continue
                for sub, messages in flatten_errors(item, f"{prefix}[{index}]").items():
                    out.setdefault(sub, []).extend(messages)
    else:
        out[prefix or "body"] = [str(detail)]
    return out


def _message(fields: Mapping[str, list[str]]) -> str:
    """One problem: "path: message"; several: "Invalid input." (they are all in extra.fields)."""
    if len(fields) == 1:
        path, messages = next(iter(fields.items()))
        if len(messages) == 1:
            return f"{path}: {messages[0]}"
    return INVALID_INPUT


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER: every handled error as {"message", "extra"}."""
    if isinstance(exc, ApplicationError):
        return Response({"message": exc.message, "extra": exc.extra}, status=exc.status_code)
    if isinstance(exc, OperationalError | InterfaceError):
        # The database is restarting or unreachable: a client should retry, not report a bug.
        logger.warning("API: database unavailable: %s", exc)
        return Response(
            {"message": "The database is unavailable; retry shortly.", "extra": {}},
            status=503,
            headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
        )
    if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
        exc = _throttled_if_over(exc, context)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_exception_handler(exc, context)
    if response is None or not isinstance(exc, exceptions.APIException):
        return response  # an unexpected error: Django's 500 handling
    extra: dict[str, Any] = {}
    if isinstance(exc, exceptions.ValidationError):
        fields = flatten_errors(exc.detail)
        message = _message(fields)
        extra["fields"] = fields
        codes = flatten_errors(exc.get_codes()).values()
        if all(code == REFUSED for field_codes in codes for code in field_codes):
            response.status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    elif isinstance(exc.detail, Mapping | list):
        message = INVALID_INPUT
        extra["fields"] = flatten_errors(exc.detail)
    else:
        message = str(exc.detail)
    wait = getattr(exc, "wait", None)
    if isinstance(exc, exceptions.Throttled) and wait is not None:
        extra["retryAfterSeconds"] = int(wait + 0.999)
    response.data = {"message": message, "extra": extra}
    return response


def _throttled_if_over(exc: exceptions.APIException, context: dict[str, Any]) -> Exception:
    """A request refused for its credentials counts against the anonymous rate of its address;
    past it, the answer is a 429 (the documented 60/min), not one more 401."""
    from api.throttling import RefusedCallerThrottle  # throttling imports the authentication

    request, view = context.get("request"), context.get("view")
    if request is None:
        return exc
    throttle = RefusedCallerThrottle()
    if throttle.allow_request(request, view):
        return exc
    return exceptions.Throttled(wait=throttle.wait())
