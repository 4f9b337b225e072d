"""GPUTopology: place multi-GPU pods on the best-connected GPU set the cluster can offer.

Filter enforces `restricted` / `single-numa-node` (the GPU set within the asked scope; with a NUMA-
level scope, the pod's CPU on that NUMA node too). Score ranks nodes by the closest set they can
still offer. Reserve picks the GPU ids by best fit (see gpu_sets): the seeds' plugin took the NUMA
node with the *most* free GPUs, which is worst fit and breaks up the blocks that later 4- and 8-GPU
pods need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import (
    MAX_NODE_SCORE,
    AllocationDraft,
    FloatArray,
    IntArray,
    NodeVerdicts,
    VerdictBuilder,
)
from scheduling.core.gpu_sets import NO_REQUIREMENT, Requirement
from scheduling.core.plugin_args import ArgReader
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import PodRequest, TopologyScope

NAME = "GPUTopology"
SEEDS_NAME = "GPUTopologyAware"  # what the seeds' profile calls this plugin
DEFAULT_ANNOTATION = "gpu-topology.nvidia.com/info"
_STATE_KEY = "PreFilter" + NAME
_NUMA_BOUND_SCOPES = (TopologyScope.NUMA, TopologyScope.PCIE)
# Nodes that cannot offer the best rank any candidate offers score at most this, so with the
# profile's weight a closer GPU set outweighs every other plugin's preference.
_LOWER_RANK_CEILING = 20.0


@dataclass(frozen=True, slots=True)
class _PodTopology:
    requirement: Requirement
    cpu_on_gpu_numa: bool  # the pod's CPU must come from the NUMA node of its GPUs

    def describe(self, pod: PodRequest) -> str:
        return f"topology policy {pod.topology_policy} (scope {self.requirement.scope})"


class GPUTopology:
    def __init__(self, name: str, annotation: str, prefer_same_numa: bool) -> None:
        self.name = name
        self.annotation = annotation  # where the Kubernetes adapter reads a node's topology from
        self.prefer_same_numa = prefer_same_numa

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> Status:
        if pod.gpus == 0:
            state.skipped.add(self.name)
            return Status.of(Code.SKIP, plugin=self.name)
        _wanted(state, pod)
        return Status.success(self.name)

    def filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> NodeVerdicts:
        wanted = _wanted(state, pod)
        if pod.gpus == 0 or wanted.requirement == NO_REQUIREMENT:
            return NodeVerdicts.all_pass(len(snapshot))
        verdicts = VerdictBuilder(len(snapshot))
        never = snapshot.best_set_rank(snapshot.whole_gpu_mask, pod.gpus, wanted.requirement) == 0
        verdicts.fail(
            never, f"node(s) have no GPU set for {wanted.describe(pod)}", unresolvable=True
        )
        free = snapshot.full_free_mask
        verdicts.fail(
            snapshot.best_set_rank(free, pod.gpus, wanted.requirement) == 0,
            f"free GPUs do not form a set for {wanted.describe(pod)}",
        )
        if wanted.cpu_on_gpu_numa:
            aligned = np.zeros(len(snapshot), dtype=np.bool_)
            for numa in range(snapshot.max_numa):
                local = free & snapshot.numa_gpu_mask[:, numa]
                fits = snapshot.best_set_rank(local, pod.gpus, wanted.requirement) > 0
                aligned |= fits & (snapshot.numa_cpu_free[:, numa] >= pod.cpu_milli)
            verdicts.fail(~aligned, "not enough free CPU on the NUMA node of the free GPUs")
        return verdicts.build()

    def pre_score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> Status:
        if pod.gpus < 2:  # one GPU is equally "connected" everywhere; nothing to rank
            state.skipped.add(self.name)
            return Status.of(Code.SKIP, plugin=self.name)
        return Status.success(self.name)

    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        if pod.gpus < 2:
            return np.full(len(candidates), MAX_NODE_SCORE)
        wanted = _wanted(state, pod)
        ranks = snapshot.best_set_rank(
            snapshot.full_free_mask, pod.gpus, wanted.requirement, candidates
        )
        scores: FloatArray = ranks.astype(np.float64)
        return scores

    def normalize_score(self, state: CycleState, pod: PodRequest, scores: FloatArray) -> FloatArray:
        best = scores.max(initial=0.0)
        if best <= 0:
            return np.full_like(scores, MAX_NODE_SCORE)
        normalized: FloatArray = np.where(
            scores == best, MAX_NODE_SCORE, _LOWER_RANK_CEILING * scores / best
        )
        return normalized

    def reserve(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, draft: AllocationDraft
    ) -> Status:
        if pod.gpus == 0 or draft.gpu_indices is not None:
            return Status.success(self.name)
        wanted = _wanted(state, pod)
        i = draft.node
        free = int(snapshot.full_free_mask[i])
        if wanted.cpu_on_gpu_numa:
            allowed = 0
            for numa in range(snapshot.max_numa):
                if snapshot.numa_cpu_free[i, numa] >= pod.cpu_milli:
                    allowed |= int(snapshot.numa_gpu_mask[i, numa])
            free &= allowed
        chooser = snapshot.chooser(i)
        gpus = chooser.choose(
            free, pod.gpus, wanted.requirement, prefer_same_numa=self.prefer_same_numa
        )
        if gpus is None:
            return Status.of(
                Code.UNSCHEDULABLE, f"no GPU set left for {wanted.describe(pod)}", plugin=self.name
            )
        draft.gpu_indices = gpus
        draft.milli_per_gpu = 1000
        if len(gpus) > 1:
            draft.scope = chooser.scope_of(gpus)
        return Status.success(self.name)


def _wanted(state: CycleState, pod: PodRequest) -> _PodTopology:
    """The pod's topology needs, computed once per cycle by whichever phase runs first (a profile
    may enable this plugin at Filter without PreFilter, as the seeds' profile does)."""
    wanted = state.get(_STATE_KEY, _PodTopology)
    if wanted is None:
        requirement = Requirement.of(pod)
        aligned = requirement.same_numa or requirement.scope in _NUMA_BOUND_SCOPES
        wanted = _PodTopology(requirement, aligned)
        state.write(_STATE_KEY, wanted)
    return wanted


def new(args: Mapping[str, Any] | None, *, name: str = NAME) -> GPUTopology:
    reader = ArgReader(name, args)
    annotation = reader.get("topologyAnnotation", str, DEFAULT_ANNOTATION)
    prefer_same_numa = reader.get("preferSameNUMA", bool, True)
    reader.done()
    return GPUTopology(name, annotation, prefer_same_numa)
