"""Per-node results kept between scheduling cycles, one set per pod shape.

A plugin's verdict or score for a node depends on the pod's shape (what of the pod it reads) and on
the node's state, which changes only when `ClusterSnapshot.generation` of that node grows. So a
plugin keeps, per shape, its column over all nodes with the generation each entry was computed at,
and a cycle recomputes only the stale entries: after the first cycles of a stream that is the one
node the previous pod went to, plus the few others placed on since that shape was last seen.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

import numpy as np

from scheduling.core.snapshot import ClusterSnapshot, FloatArray, IntArray

DEFAULT_SHAPES = 512  # distinct pod shapes kept per plugin; the least recently used goes first


class Columns:
    """Per node values for one pod shape (subclasses add the arrays), each valid at the node
    generation in `generation` (-1: never computed)."""

    def __init__(self, size: int) -> None:
        self.generation: IntArray = np.full(size, -1, dtype=np.int64)

    def stale(self, snapshot: ClusterSnapshot, rows: IntArray | None = None) -> IntArray:
        """The nodes (of `rows`, else of all) whose entries are out of date."""
        if rows is None:
            return np.flatnonzero(self.generation != snapshot.generation)
        stale: IntArray = rows[self.generation[rows] != snapshot.generation[rows]]
        return stale

    def mark(self, snapshot: ClusterSnapshot, rows: IntArray) -> None:
        self.generation[rows] = snapshot.generation[rows]


C = TypeVar("C", bound=Columns)


class ShapeCache(Generic[C]):
    """Columns per pod shape for one snapshot at a time; a different snapshot starts afresh."""

    def __init__(self, make: Callable[[int], C], capacity: int = DEFAULT_SHAPES) -> None:
        self._make = make
        self._capacity = capacity
        self._shapes: OrderedDict[Hashable, C] = OrderedDict()
        self._snapshot: weakref.ref[ClusterSnapshot] | None = None

    def get(self, key: Hashable, snapshot: ClusterSnapshot) -> C:
        if self._snapshot is None or self._snapshot() is not snapshot:
            self.clear()
            self._snapshot = weakref.ref(snapshot)
        columns = self._shapes.get(key)
        if columns is None:
            columns = self._shapes[key] = self._make(len(snapshot))
            if len(self._shapes) > self._capacity:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(key)
        return columns

    def clear(self) -> None:
        self._shapes.clear()
        self._snapshot = None

    def __len__(self) -> int:
        return len(self._shapes)


class ScoreColumns(Columns):
    """Per node, for one pod shape: a plugin's raw score."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.score: FloatArray = np.zeros(size, dtype=np.float64)
