"""Extension points, one small protocol each, named as in kube-scheduler's framework.

Unlike kube-scheduler, Filter and Score are called once per cycle with the whole snapshot and answer
for every node at once (numpy arrays), which is what makes 5,000-node cycles cheap. Each plugin
still answers per node: a reason code per node for Filter, a score per candidate node for Score.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from scheduling.core.cycle_state import CycleState
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import Placement, PodRequest

MAX_NODE_SCORE = 100.0
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
CodeArray = npt.NDArray[np.uint8]


@dataclass(frozen=True, slots=True)
class NodeVerdicts:
    """A Filter plugin's answer for every node: code 0 passes, code k fails for `reasons[k - 1]`."""

    codes: CodeArray
    reasons: tuple[str, ...] = ()
    unresolvable: tuple[bool, ...] = ()  # per reason: True when preemption cannot help

    @classmethod
    def all_pass(cls, size: int) -> NodeVerdicts:
        return cls(np.zeros(size, dtype=np.uint8))

    @property
    def failing(self) -> bool:
        """Whether any node may fail (False: no reason, so every code is 0)."""
        return bool(self.reasons)

    @property
    def passed(self) -> npt.NDArray[np.bool_]:
        passed: npt.NDArray[np.bool_] = self.codes == 0
        return passed

    def status(self, node: int, plugin: str) -> Status:
        code = int(self.codes[node])
        if code == 0:
            return Status.success(plugin)
        kind = (
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            if self.unresolvable[code - 1]
            else Code.UNSCHEDULABLE
        )
        return Status.of(kind, self.reasons[code - 1], plugin=plugin)


class VerdictBuilder:
    """Collects failing conditions in order; the first condition a node fails is its reason."""

    def __init__(self, size: int) -> None:
        self.codes: CodeArray = np.zeros(size, dtype=np.uint8)
        self.reasons: list[str] = []
        self.unresolvable: list[bool] = []

    def fail(
        self, where: npt.NDArray[np.bool_], reason: str, *, unresolvable: bool = False
    ) -> None:
        newly = where & (self.codes == 0)
        if not newly.any():
            return
        self.reasons.append(reason)
        self.unresolvable.append(unresolvable)
        self.codes[newly] = len(self.reasons)

    def build(self) -> NodeVerdicts:
        return NodeVerdicts(self.codes, tuple(self.reasons), tuple(self.unresolvable))


@dataclass(slots=True)
class AllocationDraft:
    """What Reserve plugins decide for the chosen node, one piece each; the framework then assumes
    it."""

    node: int
    gpu_indices: tuple[int, ...] | None = None
    milli_per_gpu: int = 0
    mig_slots: tuple[tuple[int, int], ...] | None = None
    numa_cpu_milli: tuple[int, ...] | None = None
    scope: str | None = None
    reclaimed: bool = False


@dataclass(frozen=True, slots=True)
class PostFilterResult:
    """Preemption's proposal: free `victims` on `nominated_node` and the pod fits there."""

    nominated_node: str
    victims: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class QueueSortPlugin(Protocol):
    def less(self, a: PodRequest, b: PodRequest) -> bool: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    def pre_filter(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot
    ) -> Status: ...


@runtime_checkable
class FilterPlugin(Protocol):
    def filter(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot
    ) -> NodeVerdicts: ...


@runtime_checkable
class RowFilterPlugin(Protocol):
    """A Filter plugin that can also judge a few nodes alone (preemption asks about one node at a
    time): which of `rows` pass. Must agree with `filter` on every node."""

    def filter_rows(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, rows: IntArray
    ) -> npt.NDArray[np.bool_]: ...


@runtime_checkable
class PostFilterPlugin(Protocol):
    def post_filter(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, verdicts: NodeVerdicts
    ) -> PostFilterResult | None: ...


@runtime_checkable
class UsesProfileFilters(Protocol):
    """A plugin that judges "would it fit" itself (preemption: after evicting victims) with the
    profile's own Filter plugins, which the framework hands it once they are built."""

    def use_filters(self, filters: Sequence[tuple[str, FilterPlugin]]) -> None: ...


@runtime_checkable
class PreScorePlugin(Protocol):
    def pre_score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> Status: ...


@runtime_checkable
class ScorePlugin(Protocol):
    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray: ...


@runtime_checkable
class NormalizeScorePlugin(Protocol):
    """kube-scheduler's ScoreExtensions: rescale a plugin's raw scores to 0-100."""

    def normalize_score(
        self, state: CycleState, pod: PodRequest, scores: FloatArray
    ) -> FloatArray: ...


@runtime_checkable
class ReservePlugin(Protocol):
    def reserve(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, draft: AllocationDraft
    ) -> Status: ...


@runtime_checkable
class UnreservePlugin(Protocol):
    def unreserve(self, state: CycleState, pod: PodRequest, placement: Placement) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    def permit(self, state: CycleState, pod: PodRequest, placement: Placement) -> Status: ...


@runtime_checkable
class BindPlugin(Protocol):
    def bind(self, state: CycleState, pod: PodRequest, placement: Placement) -> Status: ...


EXTENSION_POINTS: dict[str, type] = {
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "bind": BindPlugin,
}
