"""Events: one storage served as events.k8s.io/v1 and as core/v1, as in the API server.

events.k8s.io/v1 creates and updates get the strict validation (pkg/apis/core/validation/events.go,
`ValidateEventCreate` for events.k8s.io/v1): eventTime as a MicroTime (exactly six fractional
digits and a zone), reportingController, reportingInstance, action and reason required with their
lengths, type Normal or Warning, regarding.namespace equal to the event's, a note of at most 1 kB.
core/v1 ones get only its `legacyValidateEvent`: without an eventTime, just the namespace check;
with one, the reporting fields.

The two shapes (k8s.io/api core/v1 and events/v1 types.go; the field pairs of
pkg/apis/events/v1/conversion.go): involvedObject / regarding, message / note, source /
deprecatedSource, firstTimestamp / deprecatedFirstTimestamp, lastTimestamp /
deprecatedLastTimestamp, count / deprecatedCount, reportingComponent / reportingController; the
rest is the same. core/v1 writes its non-omitempty fields as the Go JSON does: `source: {}`,
`firstTimestamp`, `lastTimestamp` and `eventTime` null when unset, `reportingComponent` and
`reportingInstance` "" when unset.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import errors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules
from sim.kubernetes.meta import MICRO_TIME, is_dns_subdomain, qualified_name_problem

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
LIMITS = (
    ("reportingController", 253),
    ("reportingInstance", 128),
    ("action", 128),
    ("reason", 128),
)


class EventRules(Rules):
    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        problems: list[FieldError] = []
        event_time = obj.get("eventTime")
        if not isinstance(event_time, str) or not MICRO_TIME.match(event_time):
            problems.append(
                errors.invalid(
                    "eventTime",
                    event_time,
                    'parsing time as "2006-01-02T15:04:05.000000Z07:00": must have exactly six '
                    "fractional digits and a zone",
                )
            )
        for key, limit in LIMITS:
            value = obj.get(key)
            if not value:
                problems.append(errors.required(key))
            elif len(str(value)) > limit:
                problems.append(errors.too_long(key, limit))
        if obj.get("type") not in ("Normal", "Warning"):
            problems.append(errors.not_supported("type", obj.get("type"), ("Normal", "Warning")))
        namespace = obj["metadata"].get("namespace")
        regarding = obj.get("regarding") or {}
        if regarding.get("namespace", namespace) != namespace:
            problems.append(
                errors.invalid(
                    "regarding.namespace",
                    regarding.get("namespace"),
                    "does not match event.namespace",
                )
            )
        if len(str(obj.get("note", "")).encode()) > 1024:
            problems.append(errors.too_long("note", 1024))
        return problems


# core/v1 name -> events.k8s.io/v1 name, for the fields named differently.
RENAMED = (
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
    ("reportingComponent", "reportingController"),
)
SAME = ("reason", "type", "eventTime", "series", "action", "related", "reportingInstance")
CORE_TO_STORED = (*RENAMED, *((key, key) for key in SAME))


def _copy(source: Obj, target: Obj, pairs: tuple[tuple[str, str], ...]) -> Obj:
    """`target` with source[a] as target[b] for each set (a, b) pair (unset: omitted)."""
    for key, renamed in pairs:
        if source.get(key) not in (None, "", 0, {}):
            target[renamed] = source[key]
    return target


def to_core(event: Obj) -> Obj:
    """A stored (events.k8s.io/v1) event as core/v1 serves it."""
    core: Obj = {"apiVersion": "v1", "kind": "Event", "metadata": event["metadata"]}
    _copy(event, core, tuple((b, a) for a, b in CORE_TO_STORED))
    core.setdefault("involvedObject", {})
    core.setdefault("source", {})
    for key in ("firstTimestamp", "lastTimestamp", "eventTime"):
        core.setdefault(key, None)
    core.setdefault("reportingComponent", "")
    core.setdefault("reportingInstance", "")
    return core


def from_core(core: Obj) -> Obj:
    """A core/v1 event body as it is stored (events.k8s.io/v1)."""
    event: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    event["metadata"] = core.get("metadata") or {}
    return _copy(core, event, CORE_TO_STORED)


class CoreEventRules(Rules):
    """core/v1 creates and updates: `legacyValidateEvent` only, reported in core/v1's names."""

    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        problems: list[FieldError] = []
        namespace = str(obj["metadata"].get("namespace") or "")
        involved = str((obj.get("regarding") or {}).get("namespace") or "")
        if not obj.get("eventTime"):
            allowed = ("", "default") if not involved else (involved,)
            if namespace not in allowed:
                problems.append(
                    errors.invalid(
                        "involvedObject.namespace", involved, "does not match event.namespace"
                    )
                )
        else:
            if not involved and namespace not in ("default", "kube-system"):
                problems.append(
                    errors.invalid(
                        "involvedObject.namespace", involved, "does not match event.namespace"
                    )
                )
            controller = str(obj.get("reportingController") or "")
            if not controller:
                problems.append(errors.required("reportingController"))
            elif why := qualified_name_problem(controller):
                problems.append(errors.invalid("reportingController", controller, why))
            for key, path, limit in (
                ("reportingInstance", "reportingInstance", 128),
                ("action", "action", 128),
                ("reason", "reason", 128),
            ):
                value = str(obj.get(key) or "")
                if not value:
                    problems.append(errors.required(path))
                elif len(value) > limit:
                    problems.append(
                        errors.invalid(path, "", f"can have at most {limit} characters")
                    )
            if len(str(obj.get("note", ""))) > 1024:
                problems.append(errors.invalid("message", "", "can have at most 1024 characters"))
        if namespace and not is_dns_subdomain(namespace):
            problems.append(errors.invalid("namespace", namespace, "must be a DNS subdomain"))
        return problems
