"""RandomFit: the FGD paper's random baseline (spec §4.1): a uniformly random feasible node, drawn
afresh for every pod (it scores 100, the others 0), and a uniformly random GPU with room for a share
pod. Whole GPUs are the lowest-index free ones (GPUAllocator). `seed` makes a run reproducible."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import AllocationDraft, FloatArray, IntArray
from scheduling.core.plugin_args import ArgReader
from scheduling.core.plugins.gpu_allocator import borrows
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import PodRequest

NAME = "RandomFit"


class RandomFit:
    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        scores = np.zeros(len(candidates))
        if len(candidates):
            scores[self.rng.integers(len(candidates))] = 100.0
        return scores

    def reserve(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, draft: AllocationDraft
    ) -> Status:
        if not pod.gpu_milli or draft.gpu_indices is not None or borrows(pod, snapshot, draft.node):
            return Status.success(NAME)
        i = draft.node
        room = np.flatnonzero(snapshot.gpu_shareable[i] & (snapshot.gpu_free[i] >= pod.gpu_milli))
        if len(room) == 0:
            return Status.of(Code.UNSCHEDULABLE, "no GPU with room for the share", plugin=NAME)
        draft.gpu_indices = (int(room[self.rng.integers(len(room))]),)
        draft.milli_per_gpu = pod.gpu_milli
        return Status.success(NAME)


def new(args: Mapping[str, Any] | None) -> RandomFit:
    reader = ArgReader(NAME, args)
    seed = reader.get("seed", int, 0)
    reader.done()
    return RandomFit(seed)
