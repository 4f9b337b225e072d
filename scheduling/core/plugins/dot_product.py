"""DotProduct: the FGD paper's dot-product baseline (spec §4.2; `-dimext merge -norm max`).

Node vector (CPU left / 128 cores, GPU milli left / 8 GPUs), pod vector (CPU / 128 cores, GPU milli
/ 8 GPUs), all GPUs merged into one dimension. Score int(100 * (1 - dot / 2)): the *smallest* dot
product wins (Tetris inverted), so a pod goes where what it asks for most is already scarce, which
packs. The GPU of a share pod is picked by GPUAllocator's best fit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import FloatArray, IntArray
from scheduling.core.plugin_args import ArgReader
from scheduling.core.plugins.best_fit import MAX_SPEC_CPU, MAX_SPEC_GPU
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest

NAME = "DotProduct"


class DotProduct:
    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        node_cpu = snapshot.cpu_free[candidates] / MAX_SPEC_CPU
        node_gpu = snapshot.gpu_free_total[candidates] / MAX_SPEC_GPU
        dot = node_cpu * (pod.cpu_milli / MAX_SPEC_CPU) + node_gpu * (
            pod.gpu_demand_milli / MAX_SPEC_GPU
        )
        scores: FloatArray = np.trunc(100.0 * (1.0 - dot / 2.0))
        return scores


def new(args: Mapping[str, Any] | None) -> DotProduct:
    ArgReader(NAME, args).done()
    return DotProduct()
