"""The scheduler throughput benchmark: a synthetic cluster, a synthetic pod stream, every pod
through `Framework.schedule_one`, timed one by one. Only the scheduling call is timed. With
`reference`, the naive reference of bench/reference.py runs the same stream on the same cluster in
the same process afterwards, so the two are compared under the same machine load."""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

import numpy as np

from bench.reference import run_reference
from scheduling.core.framework import FloatArray, IntArray
from scheduling.core.gpu_sets import Requirement
from scheduling.core.profiles import Profile
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from sim.cluster import build_nodes, synthetic_pools
from sim.workload import synthetic_pods


@dataclass(frozen=True, slots=True)
class BenchResult:
    nodes: int
    gpus: int
    pods: int
    placed: int
    unschedulable: int
    seconds: float
    pods_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_seconds: float
    cpu_pods_per_s: float
    cpu_p99_ms: float
    multi_gpu_placed: int
    best_scope_ratio: float
    # Peak resident memory of the benchmark process once the profile's run is over (before the
    # reference runs): the snapshot, the plugins' caches and the GPU-set tables.
    max_rss_mib: float
    reference: ReferenceResult | None = None

    @property
    def ratio_to_reference(self) -> float | None:
        if self.reference is None or not self.reference.pods_per_s:
            return None
        return round(self.pods_per_s / self.reference.pods_per_s, 3)

    @property
    def cpu_ratio_to_reference(self) -> float | None:
        if self.reference is None or not self.reference.cpu_pods_per_s:
            return None
        return round(self.cpu_pods_per_s / self.reference.cpu_pods_per_s, 3)

    def as_dict(self) -> dict[str, object]:
        report: dict[str, object] = {
            field: getattr(self, field) for field in self.__dataclass_fields__
        }
        report["reference"] = self.reference.as_dict() if self.reference else None
        report["ratio_to_reference"] = self.ratio_to_reference
        report["cpu_ratio_to_reference"] = self.cpu_ratio_to_reference
        return report


@dataclass(frozen=True, slots=True)
class ReferenceResult:
    placed: int
    seconds: float
    pods_per_s: float
    p50_ms: float
    p99_ms: float
    cpu_seconds: float
    cpu_pods_per_s: float
    cpu_p99_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return {field: getattr(self, field) for field in self.__dataclass_fields__}


def run(
    profile: Profile,
    *,
    nodes: int,
    pods: int,
    topology: str,
    seed: int = 0,
    reference: bool = False,
) -> BenchResult:
    cluster = build_nodes(synthetic_pools(nodes, topology))
    stream = list(synthetic_pods(pods, seed=seed))
    snapshot = ClusterSnapshot(cluster)
    framework = Framework(profile)
    latencies = np.zeros(pods)
    cpu = np.zeros(pods)
    placed = multi = best_scope = 0
    for k, pod in enumerate(stream):
        ranks_before = (
            snapshot.best_set_rank(snapshot.full_free_mask, pod.gpus, Requirement.of(pod))
            if pod.gpus > 1
            else None
        )
        started, cpu_started = time.perf_counter(), time.thread_time()
        decision = framework.schedule_one(pod, snapshot)
        latencies[k] = time.perf_counter() - started
        cpu[k] = time.thread_time() - cpu_started
        if decision.placement is None:
            continue
        placed += 1
        if ranks_before is not None:
            multi += 1
            chooser = snapshot.chooser(snapshot.index[decision.placement.node])
            reached = chooser.rank(decision.placement.gpu_indices)
            best_scope += reached == _best_rank_on_offer(decision, ranks_before)
    max_rss_mib = _max_rss_mib()
    naive = None
    if reference:
        naive_placed, naive_latencies, naive_cpu = run_reference(cluster, stream)
        naive = ReferenceResult(naive_placed, **_timing(naive_latencies, naive_cpu))
    return BenchResult(
        nodes=len(snapshot),
        gpus=int(snapshot.gpu_count.sum()),
        pods=pods,
        placed=placed,
        unschedulable=pods - placed,
        **_timing(latencies, cpu),
        multi_gpu_placed=multi,
        best_scope_ratio=round(best_scope / multi, 4) if multi else 1.0,
        max_rss_mib=max_rss_mib,
        reference=naive,
    )


def _timing(latencies: FloatArray, cpu: FloatArray) -> dict[str, float]:
    """Wall-clock figures, and the CPU time of the same calls (this thread's): on a shared
    machine the wall clock also counts the time other processes held the core, the CPU time
    does not."""
    total, cpu_total = float(latencies.sum()), float(cpu.sum())
    return {
        "seconds": round(total, 3),
        "pods_per_s": round(len(latencies) / total, 1) if total else 0.0,
        "p50_ms": round(float(np.percentile(latencies, 50)) * 1000, 3),
        "p99_ms": round(float(np.percentile(latencies, 99)) * 1000, 3),
        "cpu_seconds": round(cpu_total, 3),
        "cpu_pods_per_s": round(len(cpu) / cpu_total, 1) if cpu_total else 0.0,
        # the tail without the turns other processes took: what the scheduler itself costs
        "cpu_p99_ms": round(float(np.percentile(cpu, 99)) * 1000, 3),
    }


def _max_rss_mib() -> float:
    """Peak resident set of this process (Linux reports ru_maxrss in KiB; the same as VmHWM)."""
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _best_rank_on_offer(decision: Decision, ranks_before: IntArray) -> int:
    """The closest GPU set that any node passing every filter could have given the pod."""
    feasible = np.ones(len(ranks_before), dtype=np.bool_)
    for _, verdicts in decision.filters:
        feasible &= verdicts.passed
    return int(ranks_before[feasible].max(initial=0))
