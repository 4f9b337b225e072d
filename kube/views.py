"""The kube-scheduler extender on the web process: POST /extender/{filter,prioritize,bind}; and
the mutating admission webhook for batch/v1 Jobs: POST /webhooks/mutate-batch-v1-job
(kube.webhook; kube-apiserver posts an AdmissionReview, a body that is not one is a 400 naming
the field).

Off unless GPUSCHED_WEB_EXTENDER=1 (a 404 otherwise): the extender belongs on its own port
(`runextender`, TLS and client certificates). When on, every call needs a bearer token of
GPUSCHED_EXTENDER_TOKEN_FILE (TLS ends in front of the web process, so no client certificate
reaches it), checked before the body is read. kube-scheduler posts JSON and expects HTTP 200; a
body it cannot use is answered with a clear message (in `Error`, or a 400 for prioritize whose
reply has no such field), never a 500; an extender that could not be built (a bad profile) is a
503, and /readyz says so too."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from common import jsonbody
from kube import extender, webhook
from kube.extender import ExtenderError, ExtenderUnavailable
from kube.extender_auth import ExtenderAuth, ExtenderAuthError

Verb = Callable[[Any], JsonResponse]


@functools.lru_cache(maxsize=4)
def _tokens(token_file: str) -> ExtenderAuth:
    return ExtenderAuth.build(token_file=token_file)


def web_auth() -> ExtenderAuth:
    """The tokens the web routes accept (the file is read once per setting)."""
    return _tokens(settings.EXTENDER_TOKEN_FILE)


def extender_route(on_bad_body: Callable[[str], JsonResponse]) -> Callable[[Verb], Any]:
    """Off, authentication, body decoding and an unavailable extender, for one verb;
    `on_bad_body` answers a body that is not usable JSON the way kube-scheduler reads it."""

    def decorate(verb: Verb) -> Any:
        @csrf_exempt
        @require_POST
        @functools.wraps(verb)
        def view(request: HttpRequest) -> JsonResponse:
            if not settings.WEB_EXTENDER:
                return JsonResponse({"Error": "the extender is served by runextender"}, status=404)
            try:
                refused = web_auth().admits(request.headers.get("Authorization", ""), None)
            except ExtenderAuthError as exc:
                return JsonResponse({"Error": f"extender unavailable: {exc}"}, status=503)
            if refused:
                return JsonResponse({"Error": refused}, status=401)
            try:
                doc = jsonbody.loads(request.body or b"null")
            except jsonbody.BodyError as exc:
                return on_bad_body(str(exc))
            try:
                return verb(doc)
            except ExtenderUnavailable as exc:
                return JsonResponse({"Error": str(exc)}, status=503)

        return view

    return decorate


@extender_route(lambda problem: JsonResponse(extender.filter_result(error=problem)))
def filter_view(doc: Any) -> JsonResponse:
    return JsonResponse(extender.get().filter(doc))


@extender_route(lambda problem: JsonResponse({"Error": problem}, status=400))
def prioritize_view(doc: Any) -> JsonResponse:
    try:
        return JsonResponse(extender.get().prioritize(doc), safe=False)
    except ExtenderError as exc:
        return JsonResponse({"Error": str(exc)}, status=400)


@extender_route(lambda problem: JsonResponse({"Error": problem}))
def bind_view(doc: Any) -> JsonResponse:
    return JsonResponse(extender.get().bind(doc))


@csrf_exempt
@require_POST
def mutate_job_view(request: HttpRequest) -> JsonResponse:
    try:
        return JsonResponse(webhook.review(jsonbody.loads(request.body or b"null")))
    except (jsonbody.BodyError, webhook.ReviewError) as exc:
        return JsonResponse({"error": str(exc)}, status=400)
