"""Scratch space for one scheduling attempt. Plugins key their entries by their own name, written
once in
PreFilter/PreScore and read by their later phases (kube-scheduler's CycleState).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class CycleState:
    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skipped: set[str] = set()  # plugins whose PreFilter/PreScore said Skip for this pod
        # Why a plugin scored a node as it did, when the number alone would mislead ("stale
        # metrics"): per plugin, node index -> note or None. A function, so a plugin explains
        # thousands of nodes without writing thousands of strings.
        self.notes: dict[str, Callable[[int], str | None]] = {}

    def note(self, plugin: str, explain: Callable[[int], str | None]) -> None:
        self.notes[plugin] = explain

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str, kind: type[T]) -> T:
        value = self._data[key]
        if not isinstance(value, kind):
            raise TypeError(
                f"cycle state {key!r} holds {type(value).__name__}, not {kind.__name__}"
            )
        return value

    def get(self, key: str, kind: type[T]) -> T | None:
        return self.read(key, kind) if key in self._data else None
