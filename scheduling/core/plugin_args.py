"""Typed reading of a plugin's `pluginConfig[].args`: every key known, every value of the right
type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class ProfileError(ValueError):
    """A scheduler profile that cannot be used; the message names the offending key or plugin."""


class ArgReader:
    def __init__(self, plugin: str, args: Mapping[str, Any] | None) -> None:
        self.plugin = plugin
        self.args = dict(args or {})
        self._read: set[str] = set()

    def get(self, key: str, kind: type[T], default: T) -> T:
        self._read.add(key)
        if key not in self.args:
            return default
        value = self.args[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ProfileError(
                f"{self.plugin}: argument {key!r} must be {kind.__name__}, "
                f"got {type(value).__name__}"
            )
        return value

    def done(self) -> None:
        """Reject arguments nobody asked for: a typo must not silently fall back to a default."""
        unknown = sorted(set(self.args) - self._read)
        if unknown:
            known = ", ".join(sorted(self._read)) or "none"
            raise ProfileError(f"{self.plugin}: unknown argument {unknown[0]!r} (known: {known})")
