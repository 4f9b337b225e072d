"""JSON request bodies, decoded with bounded cost: the one decoder of the REST API (api/parsers.py)
and of the extender (kube/views.py, kube/server.py).

Python's decoder recurses once per nesting level, so `[[[[...]]]]` 10,000 deep raised
RecursionError, a 500 (and anything walking a few hundred levels later could too). Nesting is
measured first: only the brackets outside strings count, found with C-level regex passes, and
only when the body has more brackets than the limit at all (most have a few dozen). Bodies deeper
than MAX_DEPTH are refused before they are decoded; no real request comes near it (a Kubernetes
Pod object is about ten levels deep).
"""

from __future__ import annotations

import json
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 64

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class BodyError(ValueError):
    """A body that is not usable JSON; the message says why, for the client."""


def nests_deeper(text: str, max_depth: int) -> bool:
    """Whether `text`'s arrays and objects nest deeper than `max_depth` (brackets inside strings
    do not count)."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    brackets = _BRACKET.findall(_STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > max_depth


def _refuse_constant(name: str) -> Any:
    raise BodyError(f"{name} is not JSON")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object naming a key twice is refused, naming the key: JSON leaves its meaning open
    (RFC 8259 §4) and Python keeps the last, so `"count": 1, "count": 1000` made 1,000 pods
    where a reader of the body (a proxy's check, a log) saw 1."""
    out = dict(pairs)
    if len(out) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BodyError(f"request body names the key {key!r} twice in one object")
            seen.add(key)
    return out


def loads(raw: bytes | str, *, max_depth: int = MAX_DEPTH) -> Any:
    """The decoded body; BodyError for invalid UTF-8, invalid JSON (NaN and Infinity included),
    a key named twice in one object, or nesting deeper than `max_depth`."""
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    except UnicodeDecodeError as exc:
        raise BodyError(f"request body is not UTF-8: {exc}") from None
    if nests_deeper(text, max_depth):
        raise BodyError(f"request body nests arrays and objects deeper than {max_depth} levels")
    try:
        return json.loads(
            text, parse_constant=_refuse_constant, object_pairs_hook=_refuse_duplicates
        )
    except RecursionError:  # pragma: no cover - the depth check comes first
        raise BodyError(f"request body nests deeper than {max_depth} levels") from None
    except ValueError as exc:
        if isinstance(exc, BodyError):
            raise
        raise BodyError(f"request body is not JSON: {exc}") from None
