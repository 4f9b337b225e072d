"""BestFit: the FGD paper's best-fit baseline (Weng et al., ATC '23, §4.5 of our spec).

The node left with the least CPU and GPU after placement wins: s = leftover CPU / 128 cores * 0.5 +
leftover GPU milli / 8 GPUs * 0.5 (absolute constants, not the node's capacity), score int((1 - s) *
100). The GPU of a share pod is picked by GPUAllocator's best fit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import FloatArray, IntArray
from scheduling.core.plugin_args import ArgReader
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest

NAME = "BestFit"
MAX_SPEC_CPU = 128_000.0  # milli-CPU of the largest node shape the paper normalises by
MAX_SPEC_GPU = 8_000.0  # milli-GPU of an 8-GPU node


class BestFit:
    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        cpu_left = snapshot.cpu_free[candidates] - pod.cpu_milli
        gpu_left = snapshot.gpu_free_total[candidates] - pod.gpu_demand_milli
        s = (cpu_left / MAX_SPEC_CPU) * 0.5 + (gpu_left / MAX_SPEC_GPU) * 0.5
        scores: FloatArray = np.trunc((1.0 - s) * 100.0)
        return scores


def new(args: Mapping[str, Any] | None) -> BestFit:
    ArgReader(NAME, args).done()
    return BestFit()
