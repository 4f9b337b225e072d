"""What an unknown path, a refused request or a crash answers: under /api/ the API's JSON error
shape (api/views/fallbacks.py), elsewhere a page in the dashboard's look with a way back (a body
over the upload limit to an extender route: the extender's `{"Error"}`). A page whose query the
database cancelled (GPUSCHED_DB_STATEMENT_TIMEOUT_MS, GPUSCHED_DB_LOCK_TIMEOUT_MS) or could not
run (a connection lost or refused) is a 503 with Retry-After, as the API answers, not a 500.

Debug mode (the demo, `make run`) would answer an unknown path with Django's technical 404 page,
which lists the URL patterns instead of saying anything to an admin: `debug_not_found` gives the
same answers as production there. A crash in debug mode keeps Django's technical 500 page, with the
traceback a bug report needs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import InterfaceError, OperationalError
from django.http import (
    HttpRequest,
    HttpResponse,
    HttpResponseBase,
    HttpResponseServerError,
    JsonResponse,
)
from django.shortcuts import render
from django.template import loader
from django.views import defaults

from api.exceptions import DATABASE_RETRY_AFTER_S
from api.views import fallbacks

logger = logging.getLogger(__name__)

Handler = Callable[[HttpRequest], HttpResponseBase]


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """handler404."""
    if fallbacks.is_api(request):
        return fallbacks.not_found(request, exception)
    return render(request, "404.html", {"missing_path": request.path}, status=404)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: Django's SuspiciousOperation family. A body over DATA_UPLOAD_MAX_MEMORY_SIZE
    is a 413 naming the limit."""
    if isinstance(exception, RequestDataTooBig):
        if fallbacks.is_api(request):
            return fallbacks.body_too_large(request)
        if request.path.startswith("/extender/"):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            return JsonResponse({"Error": f"request body larger than {limit} bytes"}, status=413)
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500. The page is rendered without the request's context: a context processor (the
    session, the database) may be what failed."""
    if fallbacks.is_api(request):
        return fallbacks.server_error(request)
    return HttpResponseServerError(loader.get_template("500.html").render())


def _is_debug_404(response: HttpResponseBase) -> bool:
    """Django's technical 404 page; a JSON 404 (the API's) is an answer, not a missing page."""
    return (
        settings.DEBUG
        and response.status_code == 404
        and str(response.get("Content-Type", "")).startswith("text/html")
    )


def debug_not_found(get_response: Handler) -> Handler:
    def replace(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        return not_found(request) if _is_debug_404(response) else response

    return replace


class DatabaseUnavailable:
    """Middleware: a view (or its template) that raised OperationalError or InterfaceError, a
    statement or lock timeout included, answers 503 with Retry-After outside /api/ (whose
    exception handler answers the same in its JSON shape). The page is rendered without the
    request's context: the database is what failed."""

    def __init__(self, get_response: Handler) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if fallbacks.is_api(request) or not isinstance(
            exception, OperationalError | InterfaceError
        ):
            return None
        logger.warning("%s: database unavailable: %s", request.path, exception)
        response = HttpResponse(loader.get_template("503.html").render(), status=503)
        response["Retry-After"] = str(DATABASE_RETRY_AFTER_S)
        return response
