"""LoadAware: place by what the GPUs really do, not by what was requested.

A node's utilization U is the estimated busy share of its GPUs (scheduling.core.load: DCGM's
measurement corrected for pods placed since) plus what the new pod is expected to add. Online pods
prefer the least-used node (100 - U). Batch and opportunistic pods pack toward a target utilization
T with Trimaran's TargetLoadPacking shape (shared/reference/scheduler-anchors.md §1): U <= T scores
(100 - T) * U / T + T, above it T * (100 - U) / (100 - T), over 100 scores 0.

Stale or missing measurements never block and never penalize: such nodes score a neutral 50 and the
explanation says why (Crane's silent penalty and Koordinator's score 0 on expiry are what to avoid).
For online GPU shares, Reserve also picks the least-loaded GPU with room.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.columns import ScoreColumns, ShapeCache
from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import AllocationDraft, FloatArray, IntArray
from scheduling.core.plugin_args import ArgReader, ProfileError
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import PodRequest, ServiceClass

NAME = "LoadAware"
NEUTRAL_SCORE = 50.0
DEFAULT_TARGET = 70.0


class LoadAware:
    """How long a measurement counts as fresh is not an argument of this plugin: it is the one
    window telemetry marks nodes stale by, handed over with the measurements
    (ClusterSnapshot.load_fresh_for_s)."""

    def __init__(self, target: float) -> None:
        self.target = target
        self._scores = ShapeCache(ScoreColumns)  # raw scores per pod shape, kept between cycles

    def pre_score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> Status:
        if not (pod.gpus or pod.gpu_milli):  # CPU-only and MIG pods: measured load says nothing
            state.skipped.add(NAME)
            return Status.of(Code.SKIP, plugin=NAME)
        return Status.success(NAME)

    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        online = pod.service_class is ServiceClass.ONLINE
        columns = self._scores.get((pod.expected_load, pod.gpus, online), snapshot)
        stale = columns.stale(snapshot)
        if len(stale):
            columns.score[stale] = self._node_scores(pod, snapshot, stale, online)
            columns.mark(snapshot, stale)
        stale_count = snapshot.load_stale_count
        if stale_count == len(snapshot) or (stale_count and snapshot.load_stale[candidates].any()):
            self._explain_stale(state, snapshot)
        scores: FloatArray = columns.score[candidates]
        return scores

    def _node_scores(
        self, pod: PodRequest, snapshot: ClusterSnapshot, rows: IntArray, online: bool
    ) -> FloatArray:
        gpus = snapshot.gpu_capacity_milli[rows] // 1000
        added = pod.expected_load * (pod.gpus or 1)
        utilization = 100.0 * (snapshot.node_load[rows] + added) / np.maximum(gpus, 1)
        if online:
            scores = np.clip(100.0 - utilization, 0.0, 100.0)
        else:
            scores = target_load_packing(utilization, self.target)
        result: FloatArray = np.where(snapshot.load_stale[rows], NEUTRAL_SCORE, scores)
        return result

    def _explain_stale(self, state: CycleState, snapshot: ClusterSnapshot) -> None:
        ages = snapshot.load_age_s
        limit = snapshot.load_fresh_for_s

        def why(node: int) -> str | None:
            age = float(ages[node])
            if age <= limit:
                return None
            if np.isinf(age):
                return "no GPU metrics yet: neutral score"
            return f"GPU metrics stale ({age:.0f} s old, limit {limit:.0f} s): neutral score"

        state.note(NAME, why)

    def reserve(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, draft: AllocationDraft
    ) -> Status:
        """An online GPU share goes to the least-loaded GPU that has room (fullest on ties)."""
        if (
            draft.gpu_indices is not None
            or not pod.gpu_milli
            or pod.service_class is not ServiceClass.ONLINE
        ):
            return Status.success(NAME)
        i = draft.node
        free = snapshot.gpu_free[i]
        fits = snapshot.gpu_shareable[i] & (free >= pod.gpu_milli)
        if not fits.any() or snapshot.load_age_s[i] > snapshot.load_fresh_for_s:
            return Status.success(NAME)  # nothing to add: the allocator's best fit decides
        candidates = np.flatnonzero(fits)
        order = np.lexsort((candidates, free[candidates], snapshot.gpu_load[i, candidates]))
        draft.gpu_indices = (int(candidates[order[0]]),)
        draft.milli_per_gpu = pod.gpu_milli
        return Status.success(NAME)


def target_load_packing(utilization: FloatArray, target: float) -> FloatArray:
    below = (100.0 - target) * utilization / target + target
    above = target * (100.0 - utilization) / (100.0 - target)
    scores: FloatArray = np.where(
        utilization <= target, below, np.where(utilization <= 100.0, above, 0.0)
    )
    return np.round(scores)


def new(args: Mapping[str, Any] | None) -> LoadAware:
    reader = ArgReader(NAME, args)
    if args and "freshnessSeconds" in args:
        raise ProfileError(
            f"{NAME}: freshnessSeconds is not a plugin argument: the freshness window is one "
            "setting for telemetry and scheduling, TELEMETRY_FRESHNESS_SECONDS"
        )
    target = reader.get("targetUtilization", float, DEFAULT_TARGET)
    reader.done()
    if not 0 < target < 100:
        raise ProfileError(f"{NAME}: targetUtilization must be between 0 and 100, got {target}")
    return LoadAware(target)
