"""Label and field selectors with the API server's syntax and errors.

Label selectors (k8s.io/apimachinery/pkg/labels): `k=v`, `k==v`, `k!=v`, `k in (a,b)`,
`k notin (a,b)`, `k`, `!k`, `k>1`, `k<1`, joined by commas; and the LabelSelector object
(matchLabels, matchExpressions with In / NotIn / Exists / DoesNotExist) of PDBs and DRA.
Field selectors (k8s.io/apimachinery/pkg/fields): `f=v`, `f==v`, `f!=v` on the fields a
resource supports; any other field is a 400 `field label not supported`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.kubernetes import errors
from sim.kubernetes.resources import Resource

Obj = dict[str, Any]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if not present:
            return False
        try:
            number = int(str(value))
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == "gt" else number < bound


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


EVERYTHING = LabelSelector()
_SET = re.compile(
    r"^\s*(!?)\s*([^\s!=<>(),]+)\s*(?:(notin|in)\s*\(([^)]*)\)|(==|!=|=|>|<)\s*([^\s,]*))?\s*$"
)


def _terms(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    terms, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:i])
            start = i + 1
    terms.append(text[start:])
    return [t for t in terms if t.strip()]


def parse_labels(text: str | None) -> LabelSelector:
    if not text or not text.strip():
        return EVERYTHING
    requirements = []
    for term in _terms(text):
        match = _SET.match(term)
        if match is None:
            raise errors.bad_request(f"unable to parse requirement: found '{term.strip()}'")
        negate, key, set_op, set_values, op, value = match.groups()
        if negate and (set_op or op):
            raise errors.bad_request(f"unable to parse requirement: found '{term.strip()}'")
        if set_op:
            values = tuple(v.strip() for v in set_values.split(",") if v.strip())
            requirements.append(Requirement(key, set_op, values))
        elif op in ("=", "=="):
            requirements.append(Requirement(key, "=", (value,)))
        elif op == "!=":
            requirements.append(Requirement(key, "!=", (value,)))
        elif op in (">", "<"):
            if not re.fullmatch(r"-?\d+", value or ""):
                raise errors.bad_request(
                    f"unable to parse requirement: for 'Gt', 'Lt' operators, the value must be "
                    f"an integer: {value!r}"
                )
            requirements.append(Requirement(key, "gt" if op == ">" else "lt", (value,)))
        else:
            requirements.append(Requirement(key, "!" if negate else "exists"))
    return LabelSelector(tuple(requirements))


_OPERATORS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def from_object(selector: Mapping[str, Any] | None) -> LabelSelector:
    """A metav1.LabelSelector; a malformed one raises ValueError naming the field."""
    if not selector:
        return EVERYTHING
    requirements = [
        Requirement(str(k), "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()
    ]
    for k, expression in enumerate(selector.get("matchExpressions") or []):
        op = _OPERATORS.get(str(expression.get("operator")))
        values = tuple(str(v) for v in expression.get("values") or [])
        if op is None:
            raise ValueError(
                f"matchExpressions[{k}].operator: {expression.get('operator')!r} is not a valid "
                "label selector operator"
            )
        if op in ("in", "notin") and not values:
            raise ValueError(
                f"matchExpressions[{k}].values: must be specified when `operator` "
                "is 'In' or 'NotIn'"
            )
        if op in ("exists", "!") and values:
            raise ValueError(
                f"matchExpressions[{k}].values: may not be specified when "
                "`operator` is 'Exists' or 'DoesNotExist'"
            )
        requirements.append(Requirement(str(expression.get("key")), op, values))
    return LabelSelector(tuple(requirements))


# --- field selectors ------------------------------------------------------------------------

FieldTerm = tuple[str, bool, str]  # path in the stored object, negated, value
_ALWAYS = ("metadata.name", "metadata.namespace")
_ABSENT = {"spec.unschedulable": "false", "status.succeeded": "0"}  # what a missing field reads


def parse_fields(text: str | None, resource: Resource) -> tuple[FieldTerm, ...]:
    if not text:
        return ()
    terms: list[FieldTerm] = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        for op in ("!=", "==", "="):
            if op in term:
                field, value = term.split(op, 1)
                break
        else:
            raise errors.bad_request(f"invalid selector: '{term}'; can't understand '{term}'")
        field = field.strip()
        if field not in _ALWAYS and field not in resource.field_selectors:
            raise errors.bad_request(f"field label not supported: {field}")
        terms.append((resource.field_path(field), op == "!=", value.strip()))
    return tuple(terms)


def field_value(obj: Obj, field: str) -> str:
    current: Any = obj
    for part in field.split("."):
        current = current.get(part) if isinstance(current, dict) else None
    if isinstance(current, bool):
        return "true" if current else "false"
    if current is None:
        return _ABSENT.get(field, "")
    return str(current)


def fields_match(terms: tuple[FieldTerm, ...], obj: Obj) -> bool:
    return all((field_value(obj, f) == v) != negated for f, negated, v in terms)
