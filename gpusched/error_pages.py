"""What an unknown path, a refused request or a crash answers: under /api/ the API's JSON error
shape (api/views/fallbacks.py), elsewhere a page in the dashboard's look with a way back (a body
over the upload limit to an extender route: the extender's `{"Error"}`).

Debug mode (the demo, `make run`) would answer an unknown path with Django's technical 404 page,
which lists the URL patterns instead of saying anything to an admin: `debug_not_found` gives the
same answers as production there. A crash in debug mode keeps Django's technical 500 page, with the
traceback a bug report needs.
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
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

from api.views import fallbacks

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
