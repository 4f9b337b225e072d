"""The API's JSON parser: DRF's, decoding through common/jsonbody.py (bounded nesting, NaN and
Infinity refused) so that every malformed body is a 400 in the API's error shape."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from django.conf import settings
from rest_framework import parsers, status
from rest_framework.exceptions import APIException, ParseError

from common import jsonbody


class BodyTooLarge(APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "body_too_large"


class JSONParser(parsers.JSONParser):
    def parse(
        self,
        stream: IO[Any],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        # Read at most the upload limit (plus one byte, to tell a body that is too large).
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if limit is not None else stream.read()
        if limit is not None and len(raw) > limit:
            raise BodyTooLarge(f"request body larger than {limit} bytes")
        try:
            return jsonbody.loads(raw)
        except jsonbody.BodyError as exc:
            raise ParseError(str(exc)) from None
