"""GPUTopology: place multi-GPU pods on the best-connected GPU set the cluster can offer.

Filter enforces `restricted` / `single-numa-node` (the GPU set within the asked scope; with a NUMA-
level scope, the pod's CPU on that NUMA node too). Score ranks nodes by the closest set they can
still offer; a node whose topology is unknown (scheduled on a uniform guess) ranks as if its GPUs
were only on one node, below every node whose facts show a closer set. Reserve picks the GPU ids by
best fit (see gpu_sets): the seeds' plugin took the NUMA node with the *most* free GPUs, which is
worst fit and breaks up the blocks that later 4- and 8-GPU pods need.

Under the seeds' name (GPUTopologyAware) the seeds' Filter holds: a multi-GPU pod that names no
topology policy gets all its GPUs from one NUMA node (its CPU may come from anywhere, as the seeds'
plugin did not place CPU); a pod that names a policy gets that policy. Nodes without topology facts
pass: their uniform guess is one NUMA node, which is the seeds' "degrade to default scheduling".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduling.core.columns import Columns, ScoreColumns, ShapeCache
from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import (
    MAX_NODE_SCORE,
    AllocationDraft,
    FloatArray,
    IntArray,
    NodeVerdicts,
    VerdictBuilder,
)
from scheduling.core.gpu_sets import NO_REQUIREMENT, RANK_NODE, Requirement
from scheduling.core.plugin_args import ArgReader
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import PodRequest, TopologyPolicy, TopologyScope

NAME = "GPUTopology"
SEEDS_NAME = "GPUTopologyAware"  # what the seeds' profile calls this plugin
DEFAULT_ANNOTATION = "gpu-topology.nvidia.com/info"
_NUMA_BOUND_SCOPES = (TopologyScope.NUMA, TopologyScope.PCIE)
# Distinct per-NUMA count reasons a Filter call writes before it falls back to a general one (the
# verdict codes are one byte).
_MAX_SPREAD_REASONS = 32
# Nodes that cannot offer the best rank any candidate offers score at most this, so with the
# profile's weight a closer GPU set outweighs every other plugin's preference.
_LOWER_RANK_CEILING = 20.0


@dataclass(frozen=True, slots=True)
class _PodTopology:
    requirement: Requirement
    policy: TopologyPolicy
    defaulted: bool  # the policy is the plugin's default, the pod named none
    cpu_on_gpu_numa: bool  # the pod's CPU must come from the NUMA node of its GPUs

    @property
    def one_numa_node(self) -> bool:
        return self.requirement.same_numa or self.requirement.scope in _NUMA_BOUND_SCOPES

    def describe(self) -> str:
        default = ", the default for multi-GPU pods" if self.defaulted else ""
        return f"topology policy {self.policy}, scope {self.requirement.scope}{default}"


class _FilterColumns(Columns):
    """Per node, for one (GPU count, requirement, CPU on the GPUs' NUMA node) shape: which of the
    filter's conditions the node fails."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.no_set: npt.NDArray[np.bool_] = np.zeros(size, dtype=np.bool_)  # of all its GPUs
        self.no_free_set: npt.NDArray[np.bool_] = np.zeros(size, dtype=np.bool_)
        self.cpu_elsewhere: npt.NDArray[np.bool_] = np.zeros(size, dtype=np.bool_)


class GPUTopology:
    def __init__(
        self,
        name: str,
        annotation: str,
        prefer_same_numa: bool,
        multi_gpu_policy: TopologyPolicy = TopologyPolicy.NONE,
    ) -> None:
        self.name = name
        self.annotation = annotation  # where the Kubernetes adapter reads a node's topology from
        self.prefer_same_numa = prefer_same_numa
        self.multi_gpu_policy = multi_gpu_policy  # for multi-GPU pods that name no policy
        self._state_key = "PreFilter" + name
        # Per (GPU count, requirement): each node's best set rank, kept between cycles.
        self._ranks = ShapeCache(ScoreColumns)
        self._filters = ShapeCache(_FilterColumns)

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> Status:
        if pod.gpus == 0:
            state.skipped.add(self.name)
            return Status.of(Code.SKIP, plugin=self.name)
        self._wanted(state, pod)
        return Status.success(self.name)

    def filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> NodeVerdicts:
        wanted = self._wanted(state, pod)
        if pod.gpus == 0 or wanted.requirement == NO_REQUIREMENT:
            return NodeVerdicts.all_pass(len(snapshot))
        columns = self._filters.get(_filter_key(pod, wanted), snapshot)
        stale = columns.stale(snapshot)
        if len(stale):
            self._refresh_filter(columns, pod, wanted, snapshot, stale)
        verdicts = VerdictBuilder(len(snapshot))
        for masks, failing, unresolvable, what in (
            (snapshot.whole_gpu_mask, columns.no_set, True, "GPUs"),
            (snapshot.full_free_mask, columns.no_free_set, False, "free GPUs"),
        ):
            if wanted.one_numa_node:
                _fail_by_numa_counts(verdicts, failing, masks, snapshot, pod.gpus, what, wanted)
            verdicts.fail(
                failing,
                f"{what} do not form a set for {wanted.describe()}",
                unresolvable=unresolvable,
            )
        if wanted.cpu_on_gpu_numa:
            verdicts.fail(
                columns.cpu_elsewhere, "not enough free CPU on the NUMA node of the free GPUs"
            )
        return verdicts.build()

    @staticmethod
    def _refresh_filter(
        columns: _FilterColumns,
        pod: PodRequest,
        wanted: _PodTopology,
        snapshot: ClusterSnapshot,
        rows: IntArray,
    ) -> None:
        no_set, no_free_set, cpu_elsewhere = _failing_conditions(pod, wanted, snapshot, rows)
        columns.no_set[rows], columns.no_free_set[rows] = no_set, no_free_set
        if cpu_elsewhere is not None:
            columns.cpu_elsewhere[rows] = cpu_elsewhere
        columns.mark(snapshot, rows)

    def filter_rows(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, rows: IntArray
    ) -> npt.NDArray[np.bool_]:
        wanted = self._wanted(state, pod)
        if pod.gpus == 0 or wanted.requirement == NO_REQUIREMENT:
            return np.ones(len(rows), dtype=np.bool_)
        no_set, no_free_set, cpu_elsewhere = _failing_conditions(pod, wanted, snapshot, rows)
        failing = no_set | no_free_set
        if cpu_elsewhere is not None:
            failing |= cpu_elsewhere
        passed: npt.NDArray[np.bool_] = ~failing
        return passed

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
        wanted = self._wanted(state, pod)
        columns = self._ranks.get((pod.gpus, wanted.requirement), snapshot)
        stale = columns.stale(snapshot)
        if len(stale):
            ranks = snapshot.best_set_rank(
                snapshot.full_free_mask, pod.gpus, wanted.requirement, stale
            )
            if snapshot.any_topology_guessed:
                guessed = ~snapshot.topology_known[stale]
                ranks[guessed] = np.minimum(ranks[guessed], RANK_NODE)
            columns.score[stale] = ranks
            columns.mark(snapshot, stale)
        scores: FloatArray = columns.score[candidates]
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
        wanted = self._wanted(state, pod)
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
                Code.UNSCHEDULABLE, f"no GPU set left for {wanted.describe()}", plugin=self.name
            )
        draft.gpu_indices = gpus
        draft.milli_per_gpu = 1000
        if len(gpus) > 1:
            draft.scope = chooser.scope_of(gpus)
        return Status.success(self.name)

    def _wanted(self, state: CycleState, pod: PodRequest) -> _PodTopology:
        """The pod's topology needs, computed once per cycle by whichever phase runs first (a
        profile may enable this plugin at Filter without PreFilter, as the seeds' profile does)."""
        wanted = state.get(self._state_key, _PodTopology)
        if wanted is None:
            default = self.multi_gpu_policy if pod.gpus > 1 else TopologyPolicy.NONE
            policy = pod.topology_policy or default
            requirement = Requirement.of(pod, default_policy=default)
            defaulted = pod.topology_policy is None and policy is not TopologyPolicy.NONE
            # The kubelet's single-numa-node aligns CPU too; the seeds' default placed GPUs only.
            aligned = not defaulted and (
                requirement.same_numa or requirement.scope in _NUMA_BOUND_SCOPES
            )
            wanted = _PodTopology(requirement, policy, defaulted, aligned)
            state.write(self._state_key, wanted)
        return wanted


def _failing_conditions(
    pod: PodRequest, wanted: _PodTopology, snapshot: ClusterSnapshot, rows: IntArray
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], npt.NDArray[np.bool_] | None]:
    """For `rows`: no k-GPU set meeting the requirement among all of the node's GPUs, none among
    its free GPUs, and (when the pod's CPU must be on the GPUs' NUMA node; else None) no NUMA
    node with both such a free set and the pod's CPU."""
    k, requirement, free = pod.gpus, wanted.requirement, snapshot.full_free_mask
    no_set = snapshot.best_set_rank(snapshot.whole_gpu_mask, k, requirement, rows) == 0
    no_free_set = snapshot.best_set_rank(free, k, requirement, rows) == 0
    if not wanted.cpu_on_gpu_numa:
        return no_set, no_free_set, None
    aligned = np.zeros(len(rows), dtype=np.bool_)
    for numa in range(snapshot.max_numa):
        local = free & snapshot.numa_gpu_mask[:, numa]
        fits = snapshot.best_set_rank(local, k, requirement, rows) > 0
        aligned |= fits & (snapshot.numa_cpu_free[rows, numa] >= pod.cpu_milli)
    return no_set, no_free_set, ~aligned


def _filter_key(pod: PodRequest, wanted: _PodTopology) -> tuple[object, ...]:
    """Everything of the pod the filter's conditions read."""
    cpu = pod.cpu_milli if wanted.cpu_on_gpu_numa else 0
    return (pod.gpus, wanted.requirement, wanted.cpu_on_gpu_numa, cpu)


def _fail_by_numa_counts(
    verdicts: VerdictBuilder,
    failing: npt.NDArray[np.bool_],
    masks: IntArray,
    snapshot: ClusterSnapshot,
    k: int,
    what: str,
    wanted: _PodTopology,
) -> None:
    """Name the per-NUMA-node counts where no NUMA node holds k of the GPUs (e.g. free GPUs 2+2
    for a 4-GPU pod), one reason per distinct count pattern."""
    rows = np.flatnonzero(failing)
    counts = np.bitwise_count(masks[rows, None] & snapshot.numa_gpu_mask[rows]).astype(np.int64)
    spread = (counts.max(axis=1, initial=0) < k) & (counts.sum(axis=1) >= k)
    rows, counts = rows[spread], counts[spread]
    if not len(rows):
        return
    # Per node: its counts on the NUMA nodes that hold GPUs (-1 on the others), grouped by one
    # packed key per node (5 bits per NUMA node; counts are at most 16).
    shown = np.where(snapshot.numa_gpu_mask[rows] != 0, counts, -1)
    if shown.shape[1] * 5 < 63:
        keys = ((shown + 1) << (5 * np.arange(shown.shape[1], dtype=np.int64))).sum(axis=1)
        _, first, which = np.unique(keys, return_index=True, return_inverse=True)
        patterns = shown[first]
    else:
        patterns, which = np.unique(shown, axis=0, return_inverse=True)
    for p, pattern in enumerate(patterns[:_MAX_SPREAD_REASONS].tolist()):
        where = np.zeros(len(snapshot), dtype=np.bool_)
        where[rows[which.reshape(-1) == p]] = True
        shape = "+".join(str(n) for n in pattern if n >= 0)
        verdicts.fail(
            where,
            f"{what} per NUMA node {shape}: {k} needed on one NUMA node ({wanted.describe()})",
            unresolvable=what == "GPUs",
        )


def new(args: Mapping[str, Any] | None, *, name: str = NAME) -> GPUTopology:
    reader = ArgReader(name, args)
    annotation = reader.get("topologyAnnotation", str, DEFAULT_ANNOTATION)
    prefer_same_numa = reader.get("preferSameNUMA", bool, True)
    reader.done()
    seeds = name == SEEDS_NAME
    policy = TopologyPolicy.SINGLE_NUMA_NODE if seeds else TopologyPolicy.NONE
    return GPUTopology(name, annotation, prefer_same_numa, multi_gpu_policy=policy)
