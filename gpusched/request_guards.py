"""Requests refused before any view reads them.

A NUL character (`%00`) in the path or the query string: PostgreSQL's text cannot hold one, so a
path parameter carrying it reached the database as a ValueError, a 500 with a traceback. No name
gpusched knows (tenant, workload, queue, node) can contain it, so the request is malformed: a
400 in the REST API's error shape under /api/, plain text elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse


def refuse_nul(
    get_response: Callable[[HttpRequest], HttpResponseBase],
) -> Callable[[HttpRequest], HttpResponseBase]:
    def middleware(request: HttpRequest) -> HttpResponseBase:
        where = ""
        if "\x00" in request.path:
            where = "path"
        elif any("\x00" in k or "\x00" in v for k, v in request.GET.items()):
            where = "query string"
        if not where:
            return get_response(request)
        message = f"The {where} contains a NUL character (%00), which no name may contain."
        if request.path.startswith("/api/"):
            return JsonResponse({"message": message, "extra": {"field": where}}, status=400)
        return HttpResponse(message, status=400, content_type="text/plain; charset=utf-8")

    return middleware
