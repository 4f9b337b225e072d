"""events.k8s.io/v1 Events: the required fields and limits of the API server's validation
(pkg/apis/events/validation): eventTime as a MicroTime (exactly six fractional digits and a
zone), reportingController, reportingInstance, action and reason required with their lengths,
type Normal or Warning, regarding.namespace equal to the event's, a note of at most 1 kB."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import errors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules
from sim.kubernetes.meta import MICRO_TIME

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
