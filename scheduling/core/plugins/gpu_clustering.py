"""GPUClustering: the FGD paper's GPU-clustering baseline (spec §4.3): keep pods of one GPU shape
together.

A GPU pod's tag is `share-gpu` (a share of one GPU) or `k-gpu` (k whole GPUs); a node's tags are
those of the GPU pods it holds. With b = (25 * (8000 - free GPU milli)) // 8000: b + 75 if the node
holds only the pod's tag, b + 50 if it holds it among others, b + 25 if it holds no GPU pod, b
otherwise. CPU-only pods score 0 (first-fit in the tie order). The GPU of a share pod is picked by
GPUAllocator's best fit.

The tags are not in the snapshot: this plugin counts them itself at Reserve (and forgets them at
Unreserve), per snapshot. A snapshot that already holds pods placed elsewhere starts without tags.
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import AllocationDraft, FloatArray, IntArray
from scheduling.core.plugin_args import ArgReader
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Status
from scheduling.core.types import Placement, PodRequest

NAME = "GPUClustering"
SHARE_TAG = 0  # column 0: share-gpu; column k: k-gpu
_TAG_COLUMNS = 9
_FULL_NODE_MILLI = 8000


def tag_of(pod: PodRequest) -> int | None:
    if pod.gpus:
        return min(pod.gpus, _TAG_COLUMNS - 1)
    if pod.gpu_milli:
        return SHARE_TAG
    return None


class GPUClustering:
    def __init__(self) -> None:
        self._tags: weakref.WeakKeyDictionary[ClusterSnapshot, IntArray] = (
            weakref.WeakKeyDictionary()
        )

    def tags(self, snapshot: ClusterSnapshot) -> IntArray:
        """Per node, per tag column: how many GPU pods with that tag it holds."""
        tags = self._tags.get(snapshot)
        if tags is None:
            tags = self._tags[snapshot] = np.zeros((len(snapshot), _TAG_COLUMNS), dtype=np.int64)
        return tags

    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        tag = tag_of(pod)
        if tag is None:
            return np.zeros(len(candidates))
        counts = self.tags(snapshot)[candidates]
        total = counts.sum(axis=1)
        own = counts[:, tag]
        base = (25 * (_FULL_NODE_MILLI - snapshot.gpu_free_total[candidates])) // _FULL_NODE_MILLI
        bonus = np.where(own > 0, np.where(own == total, 75, 50), np.where(total == 0, 25, 0))
        scores: FloatArray = (base + bonus).astype(np.float64)
        return scores

    def reserve(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, draft: AllocationDraft
    ) -> Status:
        tag = tag_of(pod)
        if tag is not None:
            tags = self.tags(snapshot)
            tags[draft.node, tag] += 1
            state.write(NAME, (tags, draft.node, tag))
        return Status.success(NAME)

    def unreserve(self, state: CycleState, pod: PodRequest, placement: Placement) -> None:
        entry = state.get(NAME, tuple)
        if entry is not None:
            tags, node, tag = entry
            tags[node, tag] -= 1
            state.write(NAME, ())


def new(args: Mapping[str, Any] | None) -> GPUClustering:
    ArgReader(NAME, args).done()
    return GPUClustering()
