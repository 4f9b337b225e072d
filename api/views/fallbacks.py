"""Django-level fallbacks for the API's URL space, in the API's error shape (JSON): a path under
/api/ that no route matches, a body over the upload limit that Django refused before the API saw
it, and a crash that the API's exception handler let through."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse


def is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return JsonResponse({"message": "Not found.", "extra": {}}, status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"message": "Internal server error.", "extra": {}}, status=500)


def body_too_large(request: HttpRequest) -> JsonResponse:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return JsonResponse(
        {"message": f"request body larger than {limit} bytes", "extra": {"maxBodyBytes": limit}},
        status=413,
    )
