"""HTTP endpoints of the kube-scheduler extender: POST /extender/{filter,prioritize,bind}.

kube-scheduler posts JSON and expects HTTP 200; a body it cannot use is answered with a clear
message (in `Error`, or a 400 for prioritize whose reply has no such field), never a 500."""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from kube import extender
from kube.extender import ExtenderError


def _json(request: HttpRequest) -> tuple[Any, str]:
    try:
        return json.loads(request.body or b"null"), ""
    except (ValueError, UnicodeDecodeError) as exc:
        return None, f"request body is not JSON: {exc}"


@csrf_exempt
@require_POST
def filter_view(request: HttpRequest) -> JsonResponse:
    doc, problem = _json(request)
    if problem:
        return JsonResponse(extender.filter_result(error=problem))
    return JsonResponse(extender.get().filter(doc))


@csrf_exempt
@require_POST
def prioritize_view(request: HttpRequest) -> JsonResponse:
    doc, problem = _json(request)
    if problem:
        return JsonResponse({"Error": problem}, status=400)
    try:
        return JsonResponse(extender.get().prioritize(doc), safe=False)
    except ExtenderError as exc:
        return JsonResponse({"Error": str(exc)}, status=400)


@csrf_exempt
@require_POST
def bind_view(request: HttpRequest) -> JsonResponse:
    doc, problem = _json(request)
    if problem:
        return JsonResponse({"Error": problem})
    return JsonResponse(extender.get().bind(doc))
