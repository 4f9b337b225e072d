"""GPUPacking: the FGD paper's GPU-packing baseline (spec §4.4).

Prefer, in this order: GPUs already partly used (the fuller the better), then nodes already in use
(fewest newly opened GPUs), then idle nodes (larger nodes last). CPU-only pods score 0 everywhere,
so they go first-fit in the tie order. The GPU of a share pod is picked by GPUAllocator's best fit.

Scores, for the GPUs the pod would get (the n fullest with room):
- node fully idle (every GPU free, CPU use aside): max(33 - G, G) for a G-GPU node;
- k >= 1 of those GPUs fully free: max(50 - k, 33);
- otherwise: max(100 - S // 10, 50), S = sum of (free_i * 100) // 1000 over those GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import FloatArray, IntArray
from scheduling.core.plugin_args import ArgReader
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import MILLI_PER_GPU, PodRequest

NAME = "GPUPacking"


class GPUPacking:
    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        if not pod.gpus and not pod.gpu_milli:
            return np.zeros(len(candidates))
        gpu_count = snapshot.gpu_count[candidates]
        idle_node = snapshot.full_free_count[candidates] == gpu_count
        if pod.gpus:  # whole GPUs: the chosen ones are all fully free
            partial = np.zeros(len(candidates), dtype=np.bool_)
            opened = np.full(len(candidates), pod.gpus, dtype=np.int64)
            used_score = np.zeros(len(candidates), dtype=np.int64)
        else:  # a share: the fullest GPU with room
            free = snapshot.gpu_free[candidates]
            room = snapshot.gpu_shareable[candidates] & (free >= pod.gpu_milli)
            best = np.where(room, free, MILLI_PER_GPU + 1).min(axis=1)
            partial = best < MILLI_PER_GPU
            opened = np.where(partial, 0, 1)
            used_score = np.maximum(100 - ((best * 100) // MILLI_PER_GPU) // 10, 50)
        scores = np.where(
            idle_node,
            np.maximum(33 - gpu_count, gpu_count),
            np.where(opened >= 1, np.maximum(50 - opened, 33), used_score),
        )
        return scores.astype(np.float64)


def new(args: Mapping[str, Any] | None) -> GPUPacking:
    ArgReader(NAME, args).done()
    return GPUPacking()
