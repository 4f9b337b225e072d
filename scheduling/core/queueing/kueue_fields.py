"""Field readers of the Kueue object reader (kueue_objects): names, quantities, weights,
durations, enums, namespace selectors and shapes, each raising QueueConfigError with the path of
the offending key."""

from __future__ import annotations

import enum
import math
import re
from fractions import Fraction
from typing import Any, TypeVar

from scheduling.core import quantity as quantities
from scheduling.core.queueing.config import (
    NAMESPACE_NAME_LABEL,
    ConsolidationPolicy,
    NamespaceSelector,
    QueueConfigError,
)
from scheduling.core.queueing.resources import (
    GPU,
    QuantityError,
    parse_quantity,
    resource_name_error,
)
from scheduling.core.types import GPU_MILLI_RESOURCE, Taint, TaintEffect, Toleration
from scheduling.core.yaml_documents import Shapes

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
MIN_WEIGHT = 1e-9  # Kueue: "When not 0, Weight must be greater than 10^-9"
E = TypeVar("E", bound=enum.StrEnum)


DEFAULT_RUNTIME_ANNOTATION = "gpusched.io/default-runtime"
CONSOLIDATION_ANNOTATION = "gpusched.io/consolidation"


def taint(raw: object, path: str) -> Taint:
    doc = mapping(raw, path)
    no_unknown(doc, {"key", "value", "effect", "timeAdded"}, path)
    effect = enum_value(TaintEffect, doc.get("effect", "NoSchedule"), f"{path}.effect")
    return Taint(str(doc.get("key", "")), str(doc.get("value", "") or ""), effect)


def toleration(raw: object, path: str) -> Toleration:
    doc = mapping(raw, path)
    no_unknown(doc, {"key", "operator", "value", "effect", "tolerationSeconds"}, path)
    operator = str(doc.get("operator") or "Equal")
    if operator not in ("Equal", "Exists"):
        raise QueueConfigError(f"{path}.operator must be Equal or Exists, got {operator!r}")
    effect = doc.get("effect")
    return Toleration(
        key=str(doc.get("key", "") or ""),
        operator=operator,
        value=str(doc.get("value", "") or ""),
        effect=enum_value(TaintEffect, effect, f"{path}.effect") if effect else None,
    )


def resource_name(value: object, path: str) -> str:
    error = resource_name_error(value)
    if error:
        raise QueueConfigError(f"{path}: {error}")
    assert isinstance(value, str)
    if value == GPU_MILLI_RESOURCE:
        raise QueueConfigError(
            f"{path}: {GPU_MILLI_RESOURCE} is a pod's share of one GPU and counts against "
            f"{GPU}; cover {GPU} instead"
        )
    return value


def quantity(resource: str, value: object, path: str) -> int:
    try:
        amount = parse_quantity(resource, value)
    except QuantityError as exc:
        raise QueueConfigError(f"{path}: {exc}") from exc
    if amount < 0:
        raise QueueConfigError(f"{path} must not be negative")
    return amount


def optional_quantity(resource: str, value: object, path: str) -> int | None:
    return None if value is None else quantity(resource, value, path)


def weight(raw: object, path: str) -> float:
    """fairSharing.weight, a Kubernetes quantity ("0.75", "750m", 2); default 1."""
    doc = mapping(raw or {}, path)
    no_unknown(doc, {"weight"}, path)
    value = doc.get("weight")
    if value is None:
        return 1.0
    number = float(non_negative(value, f"{path}.weight"))
    if number != 0 and number < MIN_WEIGHT:
        raise QueueConfigError(f"{path}.weight must be 0 or greater than 10^-9, got {value!r}")
    return number


def non_negative(value: object, path: str) -> Fraction:
    """A Kubernetes quantity that is not negative ("0.75", "750m", 2), by the one parser
    (scheduling.core.quantity)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise QueueConfigError(f"{path} must be a number, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise QueueConfigError(f"{path} must be a non-negative number, got {value!r}")
    try:
        number = quantities.parse(value, negative=True)
    except quantities.QuantityError:
        raise QueueConfigError(f"{path} must be a number, got {value!r}") from None
    if number < 0:
        raise QueueConfigError(f"{path} must be a non-negative number, got {value!r}")
    return number


def duration(value: object, path: str) -> float | None:
    """A Go duration ("168h", "5m", "1h30m", "0") in seconds; None when not given."""
    if value is None:
        return None
    text = str(value).strip()
    if text == "0":
        return 0.0
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise QueueConfigError(f"{path}: {value!r} is not a duration (e.g. 168h, 5m, 1h30m)")
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


def enum_value(kind: type[E], value: object, path: str) -> E:
    try:
        return kind(str(value))
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise QueueConfigError(f"{path}: {value!r} is not one of {known}") from None


def dns_name(value: object, path: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise QueueConfigError(f"{path} must be a DNS-1123 name, got {value!r}")
    return value


_SHAPES = Shapes(QueueConfigError)
no_unknown = _SHAPES.no_unknown
mapping = _SHAPES.mapping
list_of = _SHAPES.list_of


def namespace_selector(raw: object, path: str) -> NamespaceSelector:
    """A ClusterQueue's namespaceSelector on `kubernetes.io/metadata.name` (compatibility.py says
    why other labels are refused); absent: every namespace."""
    if raw is None:
        return NamespaceSelector()
    doc = mapping(raw, path)
    no_unknown(doc, {"matchLabels", "matchExpressions"}, path)
    requirements: list[tuple[str, frozenset[str]]] = []

    def only_name_label(key: object, where: str) -> None:
        if key != NAMESPACE_NAME_LABEL:
            raise QueueConfigError(
                f"{where}: selecting namespaces by {key!r} is not supported by gpusched: only "
                f"{NAMESPACE_NAME_LABEL} (every namespace has it) can be judged on both cluster "
                "sides"
            )

    labels = mapping(doc.get("matchLabels") or {}, f"{path}.matchLabels")
    for key, value in labels.items():
        only_name_label(key, f"{path}.matchLabels")
        requirements.append(("In", frozenset({str(value)})))
    for k, item in enumerate(
        list_of(doc.get("matchExpressions") or [], f"{path}.matchExpressions")
    ):
        epath = f"{path}.matchExpressions[{k}]"
        expression = mapping(item, epath)
        no_unknown(expression, {"key", "operator", "values"}, epath)
        only_name_label(expression.get("key"), f"{epath}.key")
        operator = expression.get("operator")
        values = frozenset(
            str(v) for v in list_of(expression.get("values") or [], f"{epath}.values")
        )
        if operator in ("In", "NotIn"):
            if not values:
                raise QueueConfigError(f"{epath}.values must not be empty for {operator}")
            requirements.append((str(operator), values))
        elif operator in ("Exists", "DoesNotExist"):
            if values:
                raise QueueConfigError(f"{epath}.values must be empty for {operator}")
            if operator == "DoesNotExist":
                requirements.append(("DoesNotExist", frozenset()))
        else:
            raise QueueConfigError(
                f"{epath}.operator: {operator!r} is not one of In, NotIn, Exists, DoesNotExist"
            )
    return NamespaceSelector(tuple(requirements))


def default_runtime(top: dict[str, Any], where: str) -> float | None:
    """gpusched's annotation on a ClusterQueue: the run time its workloads are assumed to take
    until similar ones have finished (a Go duration, more than 0)."""
    path = f"{where}.metadata.annotations[{DEFAULT_RUNTIME_ANNOTATION!r}]"
    annotations = _annotations(top, where)
    seconds = duration(annotations.get(DEFAULT_RUNTIME_ANNOTATION), path)
    if seconds is not None and seconds <= 0:
        raise QueueConfigError(f"{path}: must be a duration longer than 0, got 0")
    return seconds


def annotated(top: dict[str, Any], where: str) -> dict[str, Any]:
    """A ClusterQueue's fields from gpusched's own annotations."""
    return {
        "default_runtime_s": default_runtime(top, where),
        "consolidation": consolidation(top, where),
    }


def consolidation(top: dict[str, Any], where: str) -> ConsolidationPolicy:
    """gpusched's annotation on a ClusterQueue: whether it takes part in consolidation (Allowed,
    the default, or Never)."""
    value = _annotations(top, where).get(CONSOLIDATION_ANNOTATION)
    path = f"{where}.metadata.annotations[{CONSOLIDATION_ANNOTATION!r}]"
    return enum_value(ConsolidationPolicy, value or ConsolidationPolicy.ALLOWED.value, path)


def _annotations(top: dict[str, Any], where: str) -> dict[str, Any]:
    return mapping(
        (top.get("metadata") or {}).get("annotations") or {}, f"{where}.metadata.annotations"
    )
