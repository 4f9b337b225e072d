"""Scratch space for one scheduling attempt. Plugins key their entries by their own name, written
once in
PreFilter/PreScore and read by their later phases (kube-scheduler's CycleState).
"""

from __future__ import annotations

from typing import Any, TypeVar

T = TypeVar("T")


class CycleState:
    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skipped: set[str] = set()  # plugins whose PreFilter/PreScore said Skip for this pod

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
