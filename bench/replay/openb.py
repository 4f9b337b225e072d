"""Replay of Alibaba's openb GPU trace by the FGD paper's protocol (reference/fgd-and-baselines.md
§6).

Pure Python + numpy, no Django: the `replay` management command and the tests drive it.

Per seed: the pods (sorted by name) are shuffled; if their GPU demand is below `tune` x capacity,
pods drawn with replacement are appended until the next draw would pass it (the upstream simulator
compares with the drawn pod's *per-GPU* milli, a quirk kept here); above it, random pods are deleted
until it is not. Nodes get a random tie order, fixed for the run. Then every pod arrives once, in
order, onto an empty cluster and is scheduled at once; a pod that fits nowhere fails, still counts
as arrived, and the stream goes on. After each pod: (arrived GPU demand, allocated GPU milli,
cluster fragmentation).

`discretize` turns those records into one value per arrived-demand percent exactly as the authors'
`merge_alloc_discrete.py` does: arrived % = round(arrived / GPUs / 10) with Python's round half to
even, value % = round(allocated / GPUs / 10, 2), mean per bucket rounded to 2 decimals, and records
of the neighbouring buckets [k - 1, k + 1] when bucket k is empty."""

from __future__ import annotations

import csv
import multiprocessing
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from scheduling.core.plugins import fragmentation, random_fit
from scheduling.core.plugins.fragmentation import FragmentationMeasure, TaskType, WorkloadMix
from scheduling.core.profiles import Profile
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import MILLI_PER_GPU, GpuDevice, NodeSpec, PodRequest, SharingMode

DEFAULT_SEEDS = tuple(range(42, 52))
DEFAULT_TUNE = 1.3
MAX_PERCENT = 130
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Progress = Callable[[int, int], None]  # (pods done, pods in total) over all seeds


class TraceError(ValueError):
    """An input file that cannot be replayed; the message names the file and the problem."""


# --- Input -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TracePod:
    """One row of an openb pod list, read as the upstream simulator reads it."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int  # per GPU, clipped to 0..1000; 0 when num_gpu is 0
    gpu_spec: frozenset[str] = frozenset()

    @property
    def demand(self) -> int:
        """GPU demand in milli-GPU: num_gpu x per-GPU milli."""
        return self.num_gpu * self.gpu_milli

    def request(self, uid: str | None = None) -> PodRequest:
        common: dict[str, Any] = {
            "uid": uid or self.name,
            "name": self.name,
            "cpu_milli": self.cpu_milli,
            "memory_mib": self.memory_mib,
            "gpu_models": self.gpu_spec,
        }
        if self.gpu_milli == 0:
            return PodRequest(**common)
        if self.gpu_milli < MILLI_PER_GPU:
            return PodRequest(gpu_milli=self.gpu_milli, **common)
        return PodRequest(gpus=self.num_gpu, **common)

    def task_type(self) -> TaskType:
        return TaskType(
            self.cpu_milli, self.gpu_milli, self.num_gpu if self.gpu_milli else 0, self.gpu_spec
        )


def _rows(path: Path, required: Sequence[str]) -> Iterable[dict[str, str]]:
    if not path.is_file():
        raise TraceError(f"{path}: no such file")
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}: missing column(s) {', '.join(missing)}")
        yield from reader


def _int(row: Mapping[str, str], column: str, path: Path, line: int) -> int:
    try:
        return int(float(row[column] or 0))
    except ValueError:
        raise TraceError(f"{path}:{line}: {column} is not a number: {row[column]!r}") from None


def load_nodes(path: Path | str) -> list[NodeSpec]:
    """The node list (`sn, cpu_milli, memory_mib, gpu, model`), GPUs shareable (time-slicing)."""
    path = Path(path)
    nodes = []
    for line, row in enumerate(_rows(path, ("sn", "cpu_milli", "memory_mib", "gpu", "model")), 2):
        count = _int(row, "gpu", path, line)
        model = row["model"].strip()
        gpus = tuple(GpuDevice(i, model, sharing=SharingMode.TIME_SLICING) for i in range(count))
        nodes.append(
            NodeSpec(
                row["sn"].strip(),
                _int(row, "cpu_milli", path, line),
                _int(row, "memory_mib", path, line),
                gpus,
            )
        )
    if not nodes:
        raise TraceError(f"{path}: no nodes")
    return nodes


def load_pods(path: Path | str) -> list[TracePod]:
    """A pod list (`name, cpu_milli, memory_mib, num_gpu, gpu_milli[, gpu_spec, ...]`); times, QoS
    and phase are ignored, as the paper's simulator ignores them."""
    path = Path(path)
    pods = []
    for line, row in enumerate(
        _rows(path, ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")), 2
    ):
        count = _int(row, "num_gpu", path, line)
        milli = min(max(_int(row, "gpu_milli", path, line), 0), MILLI_PER_GPU) if count else 0
        if count > 1 and 0 < milli < MILLI_PER_GPU:
            raise TraceError(
                f"{path}:{line}: {count} GPUs with {milli} milli each is not supported"
            )
        spec = frozenset(s.strip() for s in (row.get("gpu_spec") or "").split("|") if s.strip())
        pods.append(
            TracePod(
                row["name"].strip(),
                _int(row, "cpu_milli", path, line),
                _int(row, "memory_mib", path, line),
                count if milli else 0,
                milli,
                spec,
            )
        )
    if not pods:
        raise TraceError(f"{path}: no pods")
    return pods


def trace_name(pods_path: Path | str) -> str:
    """`openb_pod_list_gpushare40.csv` -> `gpushare40`."""
    stem = Path(pods_path).stem
    return stem.removeprefix("openb_pod_list_")


# --- The protocol ------------------------------------------------------------------------------


def arrival_order(
    pods: Sequence[TracePod], rng: np.random.Generator, tune: float, capacity: int
) -> list[TracePod]:
    """The pods in arrival order for one seed (§6 steps 2-5)."""
    ordered = sorted(pods, key=lambda p: p.name)
    stream = [ordered[k] for k in rng.permutation(len(ordered))]
    demand = sum(p.demand for p in stream)
    limit = tune * capacity
    if demand < limit:
        while True:
            pod = ordered[int(rng.integers(len(ordered)))]
            if demand + pod.gpu_milli > limit:  # upstream compares the per-GPU milli, not n x m
                break
            stream.append(pod)
            demand += pod.demand
    else:
        while demand > limit and stream:
            demand -= stream.pop(int(rng.integers(len(stream)))).demand
    return stream


def tie_ranks(nodes: Sequence[NodeSpec], rng: np.random.Generator) -> IntArray:
    """Per node (in the given order): its place in a random priority order drawn over the nodes
    sorted by name, smallest first (the upstream `%04d-` name prefixes)."""
    by_name = sorted(range(len(nodes)), key=lambda i: nodes[i].name)
    perm = rng.permutation(len(nodes))
    ranks = np.zeros(len(nodes), dtype=np.int64)
    ranks[by_name] = perm
    return ranks


def target_workload(
    pods: Iterable[TracePod], popularity: float = fragmentation.DEFAULT_POPULARITY
) -> WorkloadMix:
    """FGD's target workload: the most common task types of the original (untuned) pod list covering
    `popularity` of its pods (the paper: 95%)."""
    return WorkloadMix(fragmentation.typical_mix((p.task_type() for p in pods), popularity))


def prepare_profile(profile: Profile, pods: Sequence[TracePod], seed: int) -> Profile:
    """Give the run's plugins what the protocol fixes: the target workload of the trace (unless the
    profile sets one; cut at the plugin's `popularity`) and a per-seed random stream."""
    used = {spec.name for specs in profile.plugins.values() for spec in specs}
    args = dict(profile.plugin_args)
    own = args.get(fragmentation.NAME, {})
    if fragmentation.NAME in used and "workload" not in own:
        popularity = float(own.get("popularity", fragmentation.DEFAULT_POPULARITY))
        args[fragmentation.NAME] = {**own, "workload": target_workload(pods, popularity).to_args()}
    if random_fit.NAME in used:
        stream = int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])
        args[random_fit.NAME] = {**args.get(random_fit.NAME, {}), "seed": stream}
    return replace(profile, plugin_args=args)


@dataclass
class SeedRun:
    seed: int
    pods: int
    failed: int
    seconds: float
    total_gpus: int
    arrived: IntArray  # per pod: GPU demand arrived so far (milli)
    allocated: IntArray  # per pod: GPU milli allocated after it
    frag: FloatArray  # per pod: cluster fragmentation after it (milli), against the target workload

    def alloc_ratio(self) -> list[float]:
        return discretize(self.arrived, self.allocated, self.total_gpus)

    def frag_rate(self) -> list[float]:
        idle = self.total_gpus * MILLI_PER_GPU - self.allocated
        rate = np.where(idle > 0, 100.0 * self.frag / np.maximum(idle, 1), 0.0)
        return discretize(self.arrived, rate, self.total_gpus, percent=False)


def replay_seed(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    profile: Profile,
    seed: int,
    tune: float = DEFAULT_TUNE,
    mix: WorkloadMix | None = None,
    progress: Callable[[int], None] | None = None,
) -> SeedRun:
    started = time.perf_counter()
    mix = mix if mix is not None else target_workload(pods)
    snapshot = ClusterSnapshot(nodes)
    total_gpus = int(snapshot.gpu_count.sum())
    rng = np.random.default_rng(seed)
    stream = arrival_order(pods, rng, tune, total_gpus * MILLI_PER_GPU)
    snapshot.tie_rank[:] = tie_ranks(snapshot.nodes, rng)
    framework = Framework(prepare_profile(profile, pods, seed))
    measure = FragmentationMeasure(snapshot, mix)

    arrived = np.zeros(len(stream), dtype=np.int64)
    allocated = np.zeros(len(stream), dtype=np.int64)
    frag = np.zeros(len(stream), dtype=np.float64)
    arrived_now = allocated_now = failed = 0
    for k, pod in enumerate(stream):
        arrived_now += pod.demand
        decision = framework.schedule_one(pod.request(f"{pod.name}#{k}"), snapshot)
        placement = decision.placement
        if placement is None:
            failed += 1
        else:
            allocated_now += placement.milli_per_gpu * len(placement.gpu_indices)
        arrived[k], allocated[k] = arrived_now, allocated_now
        frag[k] = measure.total(snapshot)
        if progress is not None and k % 256 == 255:
            progress(k + 1)
    if progress is not None:
        progress(len(stream))
    return SeedRun(
        seed,
        len(stream),
        failed,
        time.perf_counter() - started,
        total_gpus,
        arrived,
        allocated,
        frag,
    )


def discretize(
    arrived: Sequence[int] | IntArray,
    values: Sequence[float] | FloatArray | IntArray,
    total_gpus: int,
    *,
    percent: bool = True,
    max_percent: int = MAX_PERCENT,
) -> list[float]:
    """One value per arrived-demand percent 0..max_percent (see the module docstring). With
    `percent`, `values` are GPU milli and become % of capacity rounded to 2 decimals; otherwise they
    are used as they are (already a percentage)."""
    buckets: dict[int, list[float]] = {}
    for a, v in zip(np.asarray(arrived).tolist(), np.asarray(values).tolist(), strict=True):
        key = round(a / total_gpus / 10)
        buckets.setdefault(key, []).append(round(v / total_gpus / 10, 2) if percent else v)
    result = []
    for k in range(max_percent + 1):
        chosen = buckets.get(k)
        if not chosen:
            chosen = [v for j in (k - 1, k, k + 1) for v in buckets.get(j, ())]
        result.append(round(sum(chosen) / len(chosen), 2) if chosen else float("nan"))
    return result


# --- Several seeds -----------------------------------------------------------------------------


@dataclass
class ReplayResult:
    policy: str
    trace: str
    tune: float
    runs: list[SeedRun] = field(default_factory=list)

    @property
    def seeds(self) -> list[int]:
        return [run.seed for run in self.runs]

    def to_json(self, paper: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
        alloc = np.array([run.alloc_ratio() for run in self.runs])
        frag = np.array([run.frag_rate() for run in self.runs])
        keys = [str(k) for k in range(MAX_PERCENT + 1)]
        doc: dict[str, Any] = {
            "policy": self.policy,
            "trace": self.trace,
            "seeds": self.seeds,
            "tune": self.tune,
            "alloc_ratio": dict(zip(keys, _means(alloc), strict=True)),
            "frag_rate": dict(zip(keys, _means(frag), strict=True)),
            "per_seed": [
                {
                    "seed": run.seed,
                    "alloc_ratio": {"100": a[100], "130": a[MAX_PERCENT]},
                    "frag_rate": {"100": f[100], "130": f[MAX_PERCENT]},
                    "pods": run.pods,
                    "failed_pods": run.failed,
                    "seconds": round(run.seconds, 2),
                }
                for run, a, f in zip(self.runs, alloc.tolist(), frag.tolist(), strict=True)
            ],
        }
        if paper:
            doc["paper"] = {policy: dict(values) for policy, values in paper.items()}
        return doc


def _means(values: FloatArray) -> list[float | None]:
    means = values.mean(axis=0)
    return [None if np.isnan(m) else round(float(m), 4) for m in means]


# Worker processes are forked and inherit what they replay (node specs hold mapping proxies, which
# do not pickle); only the seed goes in and the SeedRun comes back.
_SHARED: Any = None
_COUNTERS: Any = None


def _run_in_worker(job: tuple[int, int]) -> SeedRun:
    seed, slot = job
    nodes, pods, profile, tune, mix = _SHARED

    def report(done: int) -> None:
        _COUNTERS[slot] = done

    result: SeedRun = replay_seed(nodes, pods, profile, seed, tune, mix, report)
    return result


def replay(
    nodes: Sequence[NodeSpec],
    pods: Sequence[TracePod],
    profile: Profile,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    *,
    tune: float = DEFAULT_TUNE,
    policy: str = "",
    trace: str = "",
    jobs: int = 1,
    progress: Progress | None = None,
) -> ReplayResult:
    """Replay every seed (in `jobs` processes) and collect the runs in seed order."""
    mix = target_workload(pods)
    result = ReplayResult(policy or profile.scheduler_name, trace, tune)
    expected = _expected_pods(pods, seeds, tune, sum(len(n.gpus) for n in nodes) * MILLI_PER_GPU)
    total = sum(expected)
    if jobs <= 1 or len(seeds) <= 1:
        done_before = 0
        for seed, size in zip(seeds, expected, strict=True):

            def report(done: int, base: int = done_before) -> None:
                if progress is not None:
                    progress(base + done, total)

            result.runs.append(replay_seed(nodes, pods, profile, seed, tune, mix, report))
            done_before += size
        return result

    global _SHARED, _COUNTERS
    context = multiprocessing.get_context("fork")
    _SHARED = (nodes, pods, profile, tune, mix)
    _COUNTERS = context.Array("q", len(seeds), lock=False)
    try:
        with context.Pool(min(jobs, len(seeds))) as pool:
            pending = pool.map_async(
                _run_in_worker, list(zip(seeds, range(len(seeds)), strict=True)), chunksize=1
            )
            while not pending.ready():
                pending.wait(0.5)
                if progress is not None:
                    progress(min(sum(_COUNTERS), total), total)
            result.runs = pending.get()
    finally:
        _SHARED = _COUNTERS = None
    if progress is not None:
        progress(total, total)
    return result


def _expected_pods(
    pods: Sequence[TracePod], seeds: Sequence[int], tune: float, capacity: int
) -> list[int]:
    """How many pods each seed's stream holds (cheap: the order is drawn, nothing is scheduled)."""
    return [len(arrival_order(pods, np.random.default_rng(seed), tune, capacity)) for seed in seeds]
