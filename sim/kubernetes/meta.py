"""Object metadata as the API server handles it: names, labels, times, and a fast copy.

Times follow apimachinery: metav1.Time is RFC 3339 to the second (`2026-01-01T12:00:00Z`),
metav1.MicroTime has exactly six fractional digits and a zone (the layout
`2006-01-02T15:04:05.000000Z07:00`).
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

from sim.kubernetes import errors

Obj = dict[str, Any]

MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")

SUBDOMAIN_HELP = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_HELP = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def clone(value: Any) -> Any:
    """A deep copy of JSON data, several times faster than copy.deepcopy."""
    if isinstance(value, dict):
        return {k: clone(v) for k, v in value.items()}
    if isinstance(value, list):
        return [clone(v) for v in value]
    return value


def new_uid() -> str:
    return str(uuid.uuid4())


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def is_dns_subdomain(name: str) -> bool:
    return len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def is_dns_label(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


def qualified_name_problem(key: str) -> str:
    """Empty when `key` is a valid qualified name (`prefix/name` or `name`), else why not."""
    prefix, _, name = key.rpartition("/")
    if prefix and not is_dns_subdomain(prefix):
        return "prefix part " + SUBDOMAIN_HELP
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _QUALIFIED_NAME.match(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
            "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        )
    return ""


def validate_metadata(meta: Obj, *, namespaced: bool, dns_label: bool = False) -> list[Any]:
    """The ObjectMeta checks every create and update goes through."""
    problems: list[errors.FieldError] = []
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        problems.append(errors.required("metadata.name", "name or generateName is required"))
    elif dns_label and not is_dns_label(name):
        problems.append(errors.invalid("metadata.name", name, LABEL_HELP))
    elif not dns_label and not is_dns_subdomain(name):
        problems.append(errors.invalid("metadata.name", name, SUBDOMAIN_HELP))
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            problems.append(
                errors.invalid(f"metadata.{field}", value, "must map strings to strings")
            )
            continue
        for key, text in value.items():
            why = qualified_name_problem(key)
            if why:
                problems.append(errors.invalid(f"metadata.{field}", key, why))
            elif field == "labels" and (len(text) > 63 or not _LABEL_VALUE.match(text)):
                problems.append(
                    errors.invalid(
                        "metadata.labels",
                        text,
                        "a valid label must be an empty string or "
                        "consist of alphanumeric characters, '-', '_' or '.', and must start "
                        "and end with an alphanumeric character",
                    )
                )
    for k, ref in enumerate(meta.get("ownerReferences") or []):
        for key in ("apiVersion", "kind", "name", "uid"):
            if not isinstance(ref, dict) or not ref.get(key):
                problems.append(errors.required(f"metadata.ownerReferences[{k}].{key}"))
    controllers = [
        r for r in meta.get("ownerReferences") or [] if isinstance(r, dict) and r.get("controller")
    ]
    if len(controllers) > 1:
        problems.append(
            errors.invalid(
                "metadata.ownerReferences",
                controllers,
                "Only one reference can have Controller set to true",
            )
        )
    finalizers = meta.get("finalizers")
    if finalizers is not None and not (
        isinstance(finalizers, list) and all(isinstance(f, str) for f in finalizers)
    ):
        problems.append(errors.invalid("metadata.finalizers", finalizers, "must be strings"))
    return problems


def labels_of(obj: Obj) -> dict[str, str]:
    value = (obj.get("metadata") or {}).get("labels")
    return value if isinstance(value, dict) else {}


def key_of(obj: Obj) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")
