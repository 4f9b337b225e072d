"""Fragmentation: FGD, Fragmentation Gradient Descent (Weng et al., "Beware of Fragmentation",
USENIX ATC '23).

A node's GPU fragmentation is measured against a target workload, a mix of task types t with
probabilities p_t:  F(node) = sum_t p_t * frag(node, t), where frag(node, t) is the idle GPU milli
that task type t could not use there:

- t is CPU-only, may not run on the node's GPU model, or does not fit (too few GPUs with enough free
  milli, or too little CPU): the node's whole idle GPU milli;
- t fits: only the GPUs whose free milli is below t's per-GPU request.

Memory plays no part. The score of placing a pod is int(100 * sigmoid((F_before - F_after) / 1000)):
the node (and, for a GPU share, the GPU) whose fragmentation grows least wins; a share pod's GPU is
the lowest-index one with the best score (this plugin's Reserve), whole GPUs the lowest-index free
ones (GPUAllocator). Integer truncation matters: nodes within one score point tie, and ties go to
the snapshot's fixed node order, which packs pods first-fit - measured, the exact score loses ~1 pp.

`cpuBalance` (0 = the paper) adds a smooth CPU term to F: beta * max(0, idle - cpu_free * r), the
GPU milli the node's CPU cannot feed at the target workload's GPU-per-CPU ratio r. The paper's
measure only sees CPU when a type's request no longer fits; this term steers CPU-heavy pods to
CPU-rich nodes before that, and gains 0.3-0.6 pp of GPU allocation on the openb traces
(docs/benchmarks.md). `hostScarcity` (off = the paper) scales each type's p by cluster GPUs / GPUs
of the nodes that could host it (at most to the largest p): without it, the CPU term sends CPU-heavy
pods to the few 128-core 8-GPU nodes that 120-core 8-GPU pods need, and those fail from 60% arrival.

Speed: per node the per-type counts are kept with the snapshot generation they were computed at, and
the score of each pod shape per node likewise, so a cycle recomputes only the nodes that changed
since that shape was last scored. All work is vectorized over nodes x task types (x GPUs).

The target workload comes from the `workload` argument (task types with weights, e.g. the top-95%
types of a trace as the paper does) or, when absent, is learned from the pods the plugin has scored
recently (`recentPods`, looked at every `refreshEvery` pods, installed when it has drifted by more
than `maxDrift` in total variation). Shells may call `set_workload` at any time (the online
scheduler's recent workload mix); every cache is dropped when the mix changes."""

from __future__ import annotations

import math
import weakref
from collections import Counter, OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduling.core.columns import Columns
from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import AllocationDraft, FloatArray, IntArray
from scheduling.core.plugin_args import ArgReader, ProfileError
from scheduling.core.plugins.gpu_allocator import borrows
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import MILLI_PER_GPU, PodRequest

NAME = "Fragmentation"
DEFAULT_POPULARITY = 0.95  # the paper keeps the most common types covering 95% of the pods
_SHAPE_CACHE_SIZE = 512
_EXACT_DECIMALS = 6  # `scoreStep: 0` compares F changes rounded to 1e-6 milli-GPU

BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class TaskType:
    """A pod shape as FGD counts it: CPU, per-GPU milli (1000 = whole GPUs), GPU count, allowed
    models. Memory is not part of it."""

    cpu_milli: int
    gpu_milli: int = 0
    gpus: int = 0
    models: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or not 0 <= self.gpu_milli <= MILLI_PER_GPU or self.gpus < 0:
            raise ValueError(f"task type {self}: requests out of range")
        if (self.gpus == 0) != (self.gpu_milli == 0):
            raise ValueError(
                f"task type {self}: gpus and gpu_milli must be both zero or both positive"
            )
        if self.gpus > 1 and self.gpu_milli != MILLI_PER_GPU:
            raise ValueError(f"task type {self}: several GPUs must be whole GPUs")

    @classmethod
    def of(cls, pod: PodRequest) -> TaskType:
        if pod.gpus:
            return cls(pod.cpu_milli, MILLI_PER_GPU, pod.gpus, pod.gpu_models)
        if pod.gpu_milli:
            return cls(pod.cpu_milli, pod.gpu_milli, 1, pod.gpu_models)
        return cls(pod.cpu_milli, 0, 0, pod.gpu_models)

    def to_args(self, weight: float) -> dict[str, Any]:
        return {
            "cpuMilli": self.cpu_milli,
            "gpuMilli": self.gpu_milli,
            "gpus": self.gpus,
            "models": sorted(self.models),
            "weight": weight,
        }


class WorkloadMix:
    """Task types with probabilities (normalized to sum 1). `version` grows with every update, so
    whoever caches results computed against the mix knows when to drop them."""

    def __init__(self, weighted: Iterable[tuple[TaskType, float]] = ()) -> None:
        self.types: tuple[TaskType, ...] = ()
        self.probabilities: tuple[float, ...] = ()
        self.version = 0
        self.update(weighted)

    def update(self, weighted: Iterable[tuple[TaskType, float]]) -> None:
        merged: dict[TaskType, float] = {}
        for task, weight in weighted:
            if not weight >= 0 or math.isinf(weight):
                raise ValueError(f"task type {task}: weight must be a finite non-negative number")
            merged[task] = merged.get(task, 0.0) + float(weight)
        total = sum(merged.values())
        kept = [(t, w) for t, w in merged.items() if w > 0]
        self.types = tuple(t for t, _ in kept)
        self.probabilities = tuple(w / total for _, w in kept)
        self.version += 1

    def __len__(self) -> int:
        return len(self.types)

    def items(self) -> list[tuple[TaskType, float]]:
        return list(zip(self.types, self.probabilities, strict=True))

    def to_args(self) -> list[dict[str, Any]]:
        return [task.to_args(p) for task, p in self.items()]


def typical_mix(
    tasks: Iterable[PodRequest | TaskType], popularity: float = DEFAULT_POPULARITY
) -> list[tuple[TaskType, float]]:
    """The paper's target workload: count pods per task type (CPU-only types included), sort by
    count (ties: cpu, per-GPU milli, GPU count, models, all descending), keep types until they cover
    `popularity` of all pods, and weight each kept type by its count."""
    return mix_of_counts(
        Counter(t if isinstance(t, TaskType) else TaskType.of(t) for t in tasks), popularity
    )


def mix_of_counts(
    counts: Mapping[TaskType, int], popularity: float = DEFAULT_POPULARITY
) -> list[tuple[TaskType, float]]:
    """typical_mix of pods already counted per task type."""
    total = sum(counts.values())
    ordered = sorted(
        counts.items(),
        key=lambda kv: (
            kv[1],
            kv[0].cpu_milli,
            kv[0].gpu_milli,
            kv[0].gpus,
            "|".join(sorted(kv[0].models)),
        ),
        reverse=True,
    )
    kept: list[tuple[TaskType, float]] = []
    covered = 0
    for task, count in ordered:
        if kept and covered >= popularity * total:
            break
        kept.append((task, float(count)))
        covered += count
    return kept


def drift(mix: WorkloadMix, weighted: Iterable[tuple[TaskType, float]]) -> float:
    """Total variation distance between `mix` and the (normalized) weighted task types, 0..1."""
    other: dict[TaskType, float] = {}
    for task, weight in weighted:
        other[task] = other.get(task, 0.0) + weight
    total = sum(other.values()) or 1.0
    current = dict(mix.items())
    keys = set(current) | set(other)
    return 0.5 * sum(abs(current.get(t, 0.0) - other.get(t, 0.0) / total) for t in keys)


def mix_from_args(items: Sequence[object], plugin: str = NAME) -> list[tuple[TaskType, float]]:
    weighted = []
    for k, item in enumerate(items):
        if not isinstance(item, Mapping):
            raise ProfileError(f"{plugin}: workload[{k}] must be a mapping")
        reader = ArgReader(f"{plugin}.workload[{k}]", item)
        cpu = reader.get("cpuMilli", int, 0)
        milli = reader.get("gpuMilli", int, 0)
        gpus = reader.get("gpus", int, 0)
        models = reader.get("models", list, [])
        weight = reader.get("weight", float, 1.0)
        reader.done()
        if gpus and not milli:
            milli = MILLI_PER_GPU
        if milli and not gpus:
            gpus = 1
        try:
            task = TaskType(cpu, milli, gpus, frozenset(str(m) for m in models))
        except ValueError as exc:
            raise ProfileError(f"{plugin}: workload[{k}]: {exc}") from exc
        if not weight >= 0 or math.isinf(weight):
            raise ProfileError(
                f"{plugin}: workload[{k}].weight must be a finite non-negative number"
            )
        weighted.append((task, weight))
    return weighted


class _Compiled:
    """A mix as arrays (T task types), resolved against one snapshot's nodes."""

    def __init__(
        self,
        mix: WorkloadMix,
        snapshot: ClusterSnapshot,
        balance: float = 0.0,
        host_scarcity: bool = False,
    ) -> None:
        self.version = mix.version
        models = snapshot.models
        types = mix.types
        self.cpu: IntArray = np.array([t.cpu_milli for t in types], dtype=np.int64)
        self.milli: IntArray = np.array([t.gpu_milli for t in types], dtype=np.int64)
        self.count: IntArray = np.array([t.gpus for t in types], dtype=np.int64)
        self.p: FloatArray = np.array(mix.probabilities, dtype=np.float64)
        self.gpu_type: BoolArray = self.milli > 0
        # Per-GPU counts depend only on a type's per-GPU milli, which few types differ in: they are
        # kept per distinct milli (threshold) and read per type through `type_threshold`.
        thresholds, self.type_threshold = np.unique(self.milli, return_inverse=True)
        self.thresholds: IntArray = thresholds.astype(np.int64)
        self.type_threshold = self.type_threshold.reshape(-1)
        allowed = np.array(
            [[not t.models or model in t.models for t in types] for model in models], dtype=np.bool_
        )
        # per GPU model, per task type: may the type run there (CPU-only types: irrelevant)
        self.allowed: BoolArray = allowed.reshape(len(models), len(types))
        self.any_model_bound = not bool(self.allowed.all())  # else the model check is skipped
        self.node_model: IntArray = snapshot.model_id.copy()
        self.balance = balance
        gpu_weight = self.p[self.gpu_type]
        cpu_need = float((gpu_weight * self.cpu[self.gpu_type]).sum())
        gpu_need = float((gpu_weight * (self.count * self.milli)[self.gpu_type]).sum())
        # GPU milli the workload's GPU pods use per CPU milli (inf without GPU types: no CPU term)
        self.gpu_per_cpu = gpu_need / cpu_need if cpu_need > 0 else math.inf
        if host_scarcity:
            self.p = self._scarce_weights(snapshot)

    def _scarce_weights(self, snapshot: ClusterSnapshot) -> FloatArray:
        """Each GPU type's p scaled by (cluster GPUs / GPUs of the nodes that could host it when
        empty), at most up to the largest p. A type that only few nodes can take (a big CPU
        request, a GPU model) then weighs as its demand per hosting GPU, so other pods leave those
        nodes to it; types every node can host keep their weight."""
        gpus = snapshot.gpu_capacity_milli // MILLI_PER_GPU
        hosts = (
            self.allowed[snapshot.model_id]
            & (gpus[:, None] >= self.count[None, :])
            & (snapshot.cpu_capacity[:, None] >= self.cpu[None, :])
        )
        supply = (hosts * gpus[:, None]).sum(axis=0).astype(np.float64)
        factor = np.where(
            self.gpu_type & (supply > 0), float(gpus.sum()) / np.maximum(supply, 1.0), 1.0
        )
        weights: FloatArray = np.maximum(self.p, np.minimum(self.p * factor, self.p.max(initial=0)))
        return weights

    def fragmentation(
        self, count: IntArray, below: IntArray, idle: IntArray, cpu: IntArray, node: IntArray
    ) -> FloatArray:
        """F of rows of `node`s in the given state (per-threshold counts and CPU left)."""
        t = self.type_threshold
        fits = self.gpu_type & (count[:, t] >= self.count) & (cpu[:, None] >= self.cpu)
        if self.any_model_bound:
            fits &= self.allowed[self.node_model[node]]
        frag = np.where(fits, below[:, t], idle[:, None])
        result: FloatArray = frag @ self.p
        if self.balance > 0:
            fed = (
                cpu * self.gpu_per_cpu
                if math.isfinite(self.gpu_per_cpu)
                else np.full(len(cpu), np.inf)
            )
            result = result + self.balance * np.maximum(0.0, idle - fed)
        return result

    def after(
        self,
        base: _NodeState,
        cpu: IntArray,
        node: IntArray,
        old: IntArray,
        new: IntArray,
        times: IntArray,
    ) -> FloatArray:
        """Fragmentation after `times` GPUs of each row go from `old` to `new` free milli."""
        m = self.thresholds[None, :]
        o, n, k = old[:, None], new[:, None], times[:, None]
        count_after = base.count[node] + k * ((n >= m).astype(np.int64) - (o >= m))
        below_after = base.below[node] + k * (np.where(n < m, n, 0) - np.where(o < m, o, 0))
        idle_after = base.idle[node] - times * (old - new)
        return self.fragmentation(count_after, below_after, idle_after, cpu, node)


class _NodeState:
    """Per node and threshold (a per-GPU milli): how many GPUs have that much free, and the free
    milli on the GPUs that have not; plus the node's idle milli. Valid at `generation`; it does
    not depend on the mix's probabilities, so it outlives a mix update with the same thresholds."""

    def __init__(self, size: int, thresholds: IntArray) -> None:
        self.thresholds = thresholds
        self.count: IntArray = np.zeros((size, len(thresholds)), dtype=np.int64)
        self.below: IntArray = np.zeros((size, len(thresholds)), dtype=np.int64)
        self.idle: IntArray = np.zeros(size, dtype=np.int64)
        self.generation: IntArray = np.full(size, -1, dtype=np.int64)

    def serves(self, size: int, thresholds: IntArray) -> bool:
        return len(self.idle) == size and np.array_equal(self.thresholds, thresholds)

    def refresh(self, snapshot: ClusterSnapshot, rows: IntArray) -> None:
        stale = rows[self.generation[rows] != snapshot.generation[rows]]
        if len(stale) == 0:
            return
        free = snapshot.gpu_free[stale]
        present = free >= 0
        enough = free[:, None, :] >= self.thresholds[None, :, None]
        short = ~enough & present[:, None, :]
        self.count[stale] = enough.sum(axis=2)
        self.below[stale] = np.where(short, free[:, None, :], 0).sum(axis=2)
        self.idle[stale] = np.where(present, free, 0).sum(axis=1)
        self.generation[stale] = snapshot.generation[stale]


class _ShapeScores(Columns):
    """Per node, for one pod shape: the score and the share GPU chosen, valid at `generation`."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.score: FloatArray = np.zeros(size, dtype=np.float64)
        self.gpu: IntArray = np.full(size, -1, dtype=np.int64)


class FragmentationMeasure:
    """F(node) for every node of one snapshot against one mix, recomputed only where nodes changed.
    `balance` and `host_scarcity` are the plugin's `cpuBalance` and `hostScarcity` (0 and False: the
    paper's measure)."""

    def __init__(
        self,
        snapshot: ClusterSnapshot,
        mix: WorkloadMix,
        balance: float = 0.0,
        host_scarcity: bool = False,
        base: _NodeState | None = None,
    ) -> None:
        """`base`: the per-threshold state of an earlier measure of the same snapshot, reused when
        its thresholds are this mix's."""
        self._snapshot = weakref.ref(snapshot)
        self.mix = mix
        self.compiled = _Compiled(mix, snapshot, balance, host_scarcity)
        thresholds = self.compiled.thresholds
        if base is None or not base.serves(len(snapshot), thresholds):
            base = _NodeState(len(snapshot), thresholds)
        self.base = base
        self.frag: FloatArray = np.zeros(len(snapshot), dtype=np.float64)
        self.generation: IntArray = np.full(len(snapshot), -1, dtype=np.int64)

    def measures(self, snapshot: ClusterSnapshot) -> bool:
        return self._snapshot() is snapshot

    def serves(self, snapshot: ClusterSnapshot) -> bool:
        return self.measures(snapshot) and self.compiled.version == self.mix.version

    def refresh(self, snapshot: ClusterSnapshot, rows: IntArray) -> None:
        stale = rows[self.generation[rows] != snapshot.generation[rows]]
        if len(stale) == 0:
            return
        base = self.base
        base.refresh(snapshot, stale)
        self.frag[stale] = self.compiled.fragmentation(
            base.count[stale], base.below[stale], base.idle[stale], snapshot.cpu_free[stale], stale
        )
        self.generation[stale] = snapshot.generation[stale]

    def node_fragmentation(self, snapshot: ClusterSnapshot) -> FloatArray:
        """F of every node (milli-GPU)."""
        self.refresh(snapshot, np.arange(len(snapshot)))
        return self.frag

    def total(self, snapshot: ClusterSnapshot) -> float:
        return float(self.node_fragmentation(snapshot).sum())


def node_fragmentation(snapshot: ClusterSnapshot, mix: WorkloadMix) -> FloatArray:
    """F of every node of `snapshot` against `mix` (one-off; a FragmentationMeasure reuses work)."""
    return FragmentationMeasure(snapshot, mix).node_fragmentation(snapshot).copy()


def sigmoid_score(delta: FloatArray) -> FloatArray:
    """100 * sigmoid(delta / 1000), delta = F_before - F_after in milli-GPU (0 change -> 50)."""
    result: FloatArray = 100.0 * (1.0 / (1.0 + np.exp(-delta / 1000.0)))
    return result


class Fragmentation:
    def __init__(
        self,
        mix: WorkloadMix | None,
        *,
        score_step: float = 1.0,
        cpu_balance: float = 0.0,
        host_scarcity: bool = False,
        recent_pods: int = 2000,
        refresh_every: int = 200,
        max_drift: float = 0.05,
        popularity: float = DEFAULT_POPULARITY,
    ) -> None:
        self.learning = mix is None
        self.mix = mix if mix is not None else WorkloadMix()
        self.score_step = score_step
        self.cpu_balance = cpu_balance
        self.host_scarcity = host_scarcity
        self.popularity = popularity
        self.refresh_every = refresh_every
        self.max_drift = max_drift
        self._recent: deque[TaskType] = deque(maxlen=max(1, recent_pods))
        # `_recent` counted per type, kept as pods come and go (counting 2,000 pods at each
        # refresh cost a millisecond)
        self._recent_counts: Counter[TaskType] = Counter()
        self._seen_since_refresh = 0
        self._measure: FragmentationMeasure | None = None
        self._shapes: OrderedDict[tuple[int, int, int], _ShapeScores] = OrderedDict()

    # The workload

    def set_workload(self, weighted: Iterable[tuple[TaskType, float]]) -> None:
        """Install a new target workload (e.g. the recent mix the online scheduler observed)."""
        self.learning = False
        self.mix.update(weighted)

    def _learn(self, pod: PodRequest) -> None:
        task, recent, counts = TaskType.of(pod), self._recent, self._recent_counts
        if len(recent) == recent.maxlen:
            leaving = recent[0]
            counts[leaving] -= 1
            if not counts[leaving]:
                del counts[leaving]
        recent.append(task)
        counts[task] += 1
        self._seen_since_refresh += 1
        if len(self.mix) == 0 or self._seen_since_refresh >= self.refresh_every:
            self._seen_since_refresh = 0
            fresh = mix_of_counts(counts, self.popularity)
            # Installing a mix drops every cached score: only when it has drifted.
            if len(self.mix) == 0 or drift(self.mix, fresh) > self.max_drift:
                self.mix.update(fresh)

    # Scoring

    def _measure_for(self, snapshot: ClusterSnapshot) -> FragmentationMeasure:
        measure = self._measure
        if measure is None or not measure.serves(snapshot):
            base = measure.base if measure is not None and measure.measures(snapshot) else None
            measure = self._measure = FragmentationMeasure(
                snapshot, self.mix, self.cpu_balance, self.host_scarcity, base=base
            )
            self._shapes.clear()
        return measure

    def _shape(self, pod: PodRequest, size: int) -> _ShapeScores:
        key = (pod.cpu_milli, pod.gpu_milli, pod.gpus)
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shapes[key] = _ShapeScores(size)
            if len(self._shapes) > _SHAPE_CACHE_SIZE:
                self._shapes.popitem(last=False)
        else:
            self._shapes.move_to_end(key)
        return shape

    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        if self.learning:
            self._learn(pod)
        shape = self._fresh_shape(pod, snapshot)
        scores: FloatArray = shape.score[candidates]
        return scores

    def _fresh_shape(
        self, pod: PodRequest, snapshot: ClusterSnapshot, rows: IntArray | None = None
    ) -> _ShapeScores:
        """The shape's scores, brought up to date on `rows` (all nodes when None: one comparison
        finds the few changed since the shape was last scored)."""
        measure = self._measure_for(snapshot)
        shape = self._shape(pod, len(snapshot))
        stale = shape.stale(snapshot, rows)
        if len(stale):
            measure.refresh(snapshot, stale)
            self._compute(measure, pod, snapshot, shape, stale)
            shape.mark(snapshot, stale)
        return shape

    def _compute(
        self,
        measure: FragmentationMeasure,
        pod: PodRequest,
        snapshot: ClusterSnapshot,
        shape: _ShapeScores,
        rows: IntArray,
    ) -> None:
        if pod.gpu_milli:
            # One hypothetical per GPU with room (fully free ones included), and per node only
            # the lowest-index GPU of each free amount: F after the share depends on the amount
            # alone, so the others score exactly the same and lose the tie on GPU index.
            free = snapshot.gpu_free[rows]
            room = snapshot.gpu_shareable[rows] & (free >= pod.gpu_milli)
            earlier = np.tri(free.shape[1], k=-1, dtype=np.bool_)  # [j, i]: GPU i before j
            same = (free[:, :, None] == free[:, None, :]) & room[:, None, :] & earlier
            local, gpu = np.nonzero(room & ~same.any(axis=2))
            old = free[local, gpu]
            new = old - pod.gpu_milli
            times = np.ones(len(local), dtype=np.int64)
        elif pod.gpus:
            # n fully free GPUs; which ones does not change F.
            local = np.arange(len(rows))
            gpu = np.full(len(rows), -1, dtype=np.int64)
            old = np.full(len(rows), MILLI_PER_GPU, dtype=np.int64)
            new = np.zeros(len(rows), dtype=np.int64)
            times = np.full(len(rows), pod.gpus, dtype=np.int64)
        else:  # CPU-only (and MIG) pods change only the node's CPU
            local = np.arange(len(rows))
            gpu = np.full(len(rows), -1, dtype=np.int64)
            old = new = times = np.zeros(len(rows), dtype=np.int64)
        node = rows[local]
        after = measure.compiled.after(
            measure.base, snapshot.cpu_free[node] - pod.cpu_milli, node, old, new, times
        )
        delta = measure.frag[node] - after
        if self.score_step > 0:
            score = np.floor(sigmoid_score(delta) / self.score_step) * self.score_step
        else:
            score = sigmoid_score(np.round(delta, _EXACT_DECIMALS))
        # per node: the best score first, then the lowest GPU index
        order = np.lexsort((gpu, -score, local))
        first = order[np.flatnonzero(np.diff(local[order], prepend=-1) != 0)]
        shape.score[rows] = 0.0  # rows without a GPU with room (only nodes the filter rejects)
        shape.gpu[rows] = -1
        shape.score[node[first]] = score[first]
        shape.gpu[node[first]] = gpu[first]

    # Reserve: the share pod's GPU

    def reserve(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, draft: AllocationDraft
    ) -> Status:
        if not pod.gpu_milli or draft.gpu_indices is not None or borrows(pod, snapshot, draft.node):
            return Status.success(NAME)
        shape = self._fresh_shape(pod, snapshot, np.array([draft.node], dtype=np.int64))
        gpu = int(shape.gpu[draft.node])
        if gpu < 0:
            return Status.of(Code.UNSCHEDULABLE, "no GPU with room for the share", plugin=NAME)
        draft.gpu_indices, draft.milli_per_gpu = (gpu,), pod.gpu_milli
        return Status.success(NAME)


def new(args: Mapping[str, Any] | None) -> Fragmentation:
    reader = ArgReader(NAME, args)
    workload = reader.get("workload", list, [])
    score_step = reader.get("scoreStep", float, 1.0)
    cpu_balance = reader.get("cpuBalance", float, 0.0)
    host_scarcity = reader.get("hostScarcity", bool, False)
    recent = reader.get("recentPods", int, 2000)
    refresh = reader.get("refreshEvery", int, 200)
    max_drift = reader.get("maxDrift", float, 0.05)
    popularity = reader.get("popularity", float, DEFAULT_POPULARITY)
    reader.done()
    if recent < 1 or refresh < 1:
        raise ProfileError(f"{NAME}: recentPods and refreshEvery must be positive")
    if not 0 <= score_step <= 100:
        raise ProfileError(f"{NAME}: scoreStep must be in 0..100 (1: the paper's integer scores)")
    if not 0 <= cpu_balance <= 1000:
        raise ProfileError(f"{NAME}: cpuBalance must be in 0..1000 (0: the paper's measure)")
    if not 0 <= max_drift <= 1:
        raise ProfileError(f"{NAME}: maxDrift must be in 0..1 (a total variation distance)")
    if not 0 < popularity <= 1:
        raise ProfileError(f"{NAME}: popularity must be in (0, 1]")
    mix = WorkloadMix(mix_from_args(workload)) if workload else None
    if mix is not None and len(mix) == 0:
        raise ProfileError(f"{NAME}: workload has no task type with a positive weight")
    return Fragmentation(
        mix,
        score_step=score_step,
        cpu_balance=cpu_balance,
        host_scarcity=host_scarcity,
        recent_pods=recent,
        refresh_every=refresh,
        max_drift=max_drift,
        popularity=popularity,
    )
