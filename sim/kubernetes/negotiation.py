"""Content negotiation as the API server does it (k8s.io/apiserver pkg/endpoints/handlers/
negotiation): request bodies by their Content-Type, answers by the Accept header.

- Bodies: JSON (also without a Content-Type), YAML, and Kubernetes' protobuf for built-in kinds
  (sim/kubernetes/protobuf.py); custom resources take no protobuf, as the API server serves CRDs
  without it. Anything else is 415 `the body of the request was in an unknown format - accepted
  media types include: ...`. Patches carry their patch type and a JSON body; a server-side
  apply patch (application/apply-patch+yaml) is 415 too, before the object is looked up.
- Answers are JSON. A client that accepts neither JSON nor a wildcard gets 406 `only the
  following media types are accepted: application/json`: the simulated server writes no
  protobuf or YAML. client-go's typed clients ask `application/vnd.kubernetes.protobuf,
  application/json` and read the JSON answer by its Content-Type.
- `as=Table` and `as=PartialObjectMetadata[List]` in Accept (kubectl get, metadata informers)
  pick the meta.k8s.io/v1 shape (sim/kubernetes/tables.py).
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from sim.kubernetes import errors, patches, protobuf

JSON, YAML = "application/json", "application/yaml"
BUILT_IN_TYPES = (JSON, YAML, protobuf.MEDIA_TYPE)
CUSTOM_TYPES = (JSON, YAML)


def media_type(header: str | None) -> str:
    return (header or "").split(";")[0].strip().lower()


def decode_body(raw: bytes, content_type: str | None, *, custom: bool, patch: bool) -> Any:
    """The request body as JSON data (None when empty)."""
    kind = media_type(content_type)
    if patch:  # checked even without a body: the type decides what the server does
        if kind not in patches.accepted(custom=custom):
            raise errors.unsupported_media_type(kind, patches.accepted(custom=custom))
        return _json(raw) if raw else None
    if not raw:
        return None
    if kind in ("", JSON):
        return _json(raw)
    if kind == YAML:
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise errors.bad_request(f"error converting YAML to JSON: {exc}") from exc
    if kind == protobuf.MEDIA_TYPE and not custom:
        return protobuf.decode(raw)
    raise errors.unsupported_media_type(kind, CUSTOM_TYPES if custom else BUILT_IN_TYPES)


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise errors.bad_request(f"couldn't get version/kind; json parse error: {exc}") from exc


def check_accept(header: str | None) -> None:
    """406 unless the client takes JSON (or anything)."""
    if not header:
        return
    for entry in header.split(","):
        kind = media_type(entry)
        if kind in (JSON, "*/*", "application/*", "application/json-seq"):
            return
    raise errors.ApiError(
        406, "NotAcceptable", f"only the following media types are accepted: {JSON}"
    )


def wanted_shape(header: str | None) -> str:
    """`Table`, `PartialObjectMetadata`, `PartialObjectMetadataList` or "" (the object), from the
    first Accept entry that asks for a meta.k8s.io/v1 shape we serve, else the first JSON one."""
    for entry in (header or "").split(","):
        parts = [p.strip() for p in entry.split(";")]
        if parts[0].lower() not in (JSON, "*/*", "application/*"):
            continue
        params = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        shape = params.get("as", "")
        if not shape:
            return ""
        if params.get("g") == "meta.k8s.io" and params.get("v") == "v1":
            return shape
    return ""
