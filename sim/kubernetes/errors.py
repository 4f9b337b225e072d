"""API errors as the API server writes them: a `Status` body with the HTTP code, a machine reason
and details (k8s.io/apimachinery/pkg/api/errors), and field errors whose messages follow
k8s.io/apimachinery/pkg/util/validation/field."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sim.kubernetes.resources import Resource

Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details: Obj = details or {}

    def status(self) -> Obj:
        doc: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
        }
        if self.reason:
            doc["reason"] = self.reason
        doc["details"] = self.details
        doc["code"] = self.code
        return doc


def success(code: int = 200, details: Obj | None = None) -> Obj:
    doc: Obj = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details:
        doc["details"] = details
    doc["code"] = code
    return doc


def _details(resource: Resource, name: str, **extra: Any) -> Obj:
    details: Obj = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.plural
    details.update(extra)
    return details


def not_found(resource: Resource, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{resource.qualified} "{name}" not found', _details(resource, name)
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource")


def already_exists(resource: Resource, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{resource.qualified} "{name}" already exists',
        _details(resource, name),
    )


def conflict(resource: Resource, name: str, why: str, *, qualified: str = "") -> ApiError:
    what = qualified or resource.qualified
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {what} "{name}": {why}',
        {**_details(resource, name), "kind": what.split(".")[0]},
    )


STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def forbidden(resource: Resource, name: str, why: str) -> ApiError:
    target = f'{resource.qualified} "{name}"' if name else resource.qualified
    return ApiError(403, "Forbidden", f"{target} is forbidden: {why}", _details(resource, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource"
    )


def unsupported_media_type(content_type: str, accepted: tuple[str, ...]) -> ApiError:
    return ApiError(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format - accepted media types include: "
        f"{', '.join(accepted)}",
    )


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def too_many_requests(message: str, causes: list[Obj], retry_after_s: int = 0) -> ApiError:
    details: Obj = {"causes": causes}
    if retry_after_s:
        details["retryAfterSeconds"] = retry_after_s
    return ApiError(429, "TooManyRequests", message, details)


def internal(message: str) -> ApiError:
    return ApiError(500, "InternalError", message)


# --- field errors ---------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldError:
    kind: str  # FieldValueRequired | FieldValueInvalid | ...
    path: str
    body: str  # "Required value", 'Invalid value: "x": detail', ...

    def __str__(self) -> str:
        return f"{self.path}: {self.body}" if self.path else self.body

    def cause(self) -> Obj:
        return {"reason": self.kind, "message": self.body, "field": self.path}


def _value(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value, separators=(",", ":"))


def required(path: str, detail: str = "") -> FieldError:
    return FieldError(
        "FieldValueRequired", path, "Required value" + (f": {detail}" if detail else "")
    )


def invalid(path: str, value: object, detail: str = "") -> FieldError:
    body = f"Invalid value: {_value(value)}" + (f": {detail}" if detail else "")
    return FieldError("FieldValueInvalid", path, body)


def not_supported(path: str, value: object, supported: tuple[str, ...]) -> FieldError:
    listed = ", ".join(json.dumps(s) for s in supported)
    body = f"Unsupported value: {_value(value)}: supported values: {listed}"
    return FieldError("FieldValueNotSupported", path, body)


def forbidden_field(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, f"Forbidden: {detail}")


def too_long(path: str, limit: int) -> FieldError:
    return FieldError("FieldValueTooLong", path, f"Too long: may not be more than {limit} bytes")


def too_many(path: str, count: int, limit: int) -> FieldError:
    return FieldError(
        "FieldValueTooMany", path, f"Too many: {count}: must have at most {limit} items"
    )


def duplicate(path: str, value: object) -> FieldError:
    return FieldError("FieldValueDuplicate", path, f"Duplicate value: {_value(value)}")


def invalid_object(resource: Resource, name: str, errors: list[FieldError]) -> ApiError:
    """422 Invalid: `Pod "x" is invalid: spec.containers: Required value`, several errors as a
    bracketed list (the aggregate's format), each one a cause."""
    text = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(map(str, errors)) + "]"
    details: Obj = {"name": name}
    if resource.group:
        details["group"] = resource.group
    details["kind"] = resource.kind
    details["causes"] = [e.cause() for e in errors]
    return ApiError(
        422, "Invalid", f'{resource.qualified_kind} "{name}" is invalid: {text}', details
    )
