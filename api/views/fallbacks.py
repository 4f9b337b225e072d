"""Django-level fallbacks for the API's URL space: what Django itself refuses (an unknown path, a
body over the upload limit, a malformed request) is answered under /api/ in the API's error shape
(JSON), under /extender/ in the extender's (`{"Error"}`), and elsewhere with Django's own page."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults


def _json(request: HttpRequest, message: str, status: int, **extra: Any) -> HttpResponse | None:
    if request.path.startswith("/api/"):
        return JsonResponse({"message": message, "extra": extra}, status=status)
    if request.path.startswith("/extender/"):
        return JsonResponse({"Error": message}, status=status)
    return None


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404."""
    return _json(request, "Not found.", 404) or defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: Django's SuspiciousOperation family; a body over DATA_UPLOAD_MAX_MEMORY_SIZE
    is a 413 naming the limit."""
    if isinstance(exception, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        response = _json(
            request, f"request body larger than {limit} bytes", 413, maxBodyBytes=limit
        )
        if response is not None:
            return response
    return _json(request, "Bad request.", 400) or defaults.bad_request(request, exception)
