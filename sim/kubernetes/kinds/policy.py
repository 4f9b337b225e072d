"""policy/v1 PodDisruptionBudgets: minAvailable or maxUnavailable (not both), each an integer
or a percentage, and a valid selector (pkg/apis/policy/validation). The status is the
disruption controller's (sim/kubernetes/disruption.py)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sim.kubernetes import errors, selectors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
_PERCENT = re.compile(r"^[0-9]+%$")


class PodDisruptionBudgetRules(Rules):
    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        problems: list[FieldError] = []
        if "minAvailable" in spec and "maxUnavailable" in spec:
            problems.append(
                errors.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set")
            )
        for key in ("minAvailable", "maxUnavailable"):
            if key in spec:
                why = int_or_percent_problem(spec[key])
                if why:
                    problems.append(errors.invalid(f"spec.{key}", spec[key], why))
        try:
            selectors.from_object(spec.get("selector"))
        except ValueError as exc:
            problems.append(errors.invalid("spec.selector", spec.get("selector"), str(exc)))
        return problems


def int_or_percent_problem(value: object) -> str:
    if isinstance(value, bool):
        return "must be an integer or a percentage"
    if isinstance(value, int):
        return "must be greater than or equal to 0" if value < 0 else ""
    if isinstance(value, str) and _PERCENT.match(value):
        return "must not be greater than 100%" if int(value[:-1]) > 100 else ""
    return "a valid percent string must be a numeric string followed by an ending '%'"
