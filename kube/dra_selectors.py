"""DRA's CEL device selectors, the simple forms (kube.dra): `device.driver == "..."`,
`device.attributes["<domain>"].<name> <op> <literal>` (==, !=, <, <=, >, >=) and
`device.capacity["<domain>"].<name>.compareTo(quantity("40Gi")) <op> 0`, `.isGreaterThan(...)`,
`.isLessThan(...)`, joined by `&&`. Anything else is refused with a reason, never guessed. The
expression sees `device.driver`, `device.attributes` and `device.capacity` grouped by domain
(CELDeviceSelector, Kubernetes API reference resource.k8s.io/v1). A missing attribute does not
match (in the API server it would be an evaluation error).
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Protocol

from scheduling.core import quantity

AttributeValue = int | bool | str | tuple[int, ...]


class SelectorError(ValueError):
    """A CEL expression outside the supported forms; the message quotes it and says why."""


class Device(Protocol):
    @property
    def driver(self) -> str: ...

    @property
    def attributes(self) -> Mapping[str, AttributeValue]: ...

    @property
    def capacity(self) -> Mapping[str, Fraction]: ...


_STRING = r"\"[^\"\\]*\"|'[^'\\]*'"
_FIELD = (
    rf"device\.(?P<map>attributes|capacity)\[(?P<domain>{_STRING})\]"
    r"\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
)
_OP = r"==|!=|<=|>=|<|>"
_DRIVER = re.compile(rf"^device\.driver\s*(?P<op>==|!=)\s*(?P<value>{_STRING})$")
_COMPARE = re.compile(rf"^{_FIELD}\s*(?P<op>{_OP})\s*(?P<value>{_STRING}|-?\d+|true|false)$")
_QUANTITY_COMPARE = re.compile(
    rf"^{_FIELD}\.compareTo\(\s*quantity\(\s*(?P<quantity>{_STRING})\s*\)\s*\)"
    rf"\s*(?P<op>{_OP})\s*0$"
)
_QUANTITY_METHOD = re.compile(
    rf"^{_FIELD}\.(?P<method>isGreaterThan|isLessThan)\(\s*quantity\(\s*(?P<quantity>{_STRING})"
    r"\s*\)\s*\)$"
)
_OPERATORS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}


@dataclass(frozen=True)
class Selector:
    """One comparison of a CEL selector: `what` is "driver", or an attribute or capacity by its
    qualified name."""

    source: str  # the CEL term, for messages
    kind: str  # "driver" | "attribute" | "capacity"
    what: str
    op: str
    value: AttributeValue | Fraction

    def matches(self, device: Device) -> bool:
        actual: object
        if self.kind == "driver":
            actual = device.driver
        elif self.kind == "attribute":
            actual = device.attributes.get(self.what)
        else:
            actual = device.capacity.get(self.what)
        if actual is None or isinstance(actual, bool) != isinstance(self.value, bool):
            return False
        if isinstance(actual, tuple):  # a list attribute: any of its values
            return any(self._compare(v) for v in actual)
        return self._compare(actual)

    def _compare(self, actual: object) -> bool:
        comparable = (isinstance(actual, str) and isinstance(self.value, str)) or (
            isinstance(actual, int | Fraction) and isinstance(self.value, int | Fraction)
        )
        if not comparable:
            return False
        return _OPERATORS[self.op](actual, self.value)


def parse_selector(expression: str) -> tuple[Selector, ...]:
    """The `&&`-joined comparisons of one CEL expression, or DraError saying what is not
    supported."""
    terms = _split_and(expression)
    return tuple(_term(term.strip(), expression) for term in terms)


def _split_and(expression: str) -> list[str]:
    """Split on `&&` outside string literals; refuse what a conjunction of comparisons is not."""
    terms, current, quote, k = [], [], "", 0
    while k < len(expression):
        char = expression[k]
        if quote:
            current.append(char)
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
            current.append(char)
        elif expression.startswith("&&", k):
            terms.append("".join(current))
            current = []
            k += 1
        elif expression.startswith("||", k) or (char == "!" and not expression.startswith("!=", k)):
            raise SelectorError(
                f"CEL {expression!r}: only comparisons joined by && are supported, not || or !"
            )
        else:
            current.append(char)
        k += 1
    terms.append("".join(current))
    return terms


def _term(term: str, expression: str) -> Selector:
    if match := _DRIVER.match(term):
        return Selector(term, "driver", "driver", match["op"], match["value"][1:-1])
    if match := _COMPARE.match(term):
        what = f"{match['domain'][1:-1]}/{match['name']}"
        kind = "attribute" if match["map"] == "attributes" else "capacity"
        raw = match["value"]
        literal: AttributeValue | Fraction
        if raw in ("true", "false"):
            literal = raw == "true"
        elif raw[0] in "\"'":
            literal = raw[1:-1]
        else:
            literal = int(raw)
        if kind == "capacity":
            raise SelectorError(
                f"CEL {expression!r}: compare capacity with .compareTo(quantity(...)), "
                f"not {match['op']}"
            )
        return Selector(term, kind, what, match["op"], literal)
    if (match := _QUANTITY_COMPARE.match(term)) or (match := _QUANTITY_METHOD.match(term)):
        if match["map"] != "capacity":
            raise SelectorError(f"CEL {expression!r}: quantities compare with capacity only")
        what = f"{match['domain'][1:-1]}/{match['name']}"
        amount = _quantity(match["quantity"][1:-1], expression)
        op = match.groupdict().get("op") or (">" if match["method"] == "isGreaterThan" else "<")
        return Selector(term, "capacity", what, op, amount)
    raise SelectorError(
        f'CEL {expression!r}: {term!r} is not a supported form (device.driver == "...", '
        'device.attributes["<domain>"].<name> <op> <literal>, '
        'device.capacity["<domain>"].<name>.compareTo(quantity("...")) <op> 0)'
    )


def _quantity(text: str, expression: str) -> Fraction:
    try:
        return quantity.parse(text, negative=True)
    except (ValueError, TypeError):
        raise SelectorError(f"CEL {expression!r}: {text!r} is not a quantity") from None
