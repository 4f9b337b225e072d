"""The scheduler throughput benchmark: a synthetic cluster, a synthetic pod stream, every pod
through `Framework.schedule_one`, timed one by one. Only the scheduling call is timed."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from scheduling.core.framework import IntArray
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
    multi_gpu_placed: int
    best_scope_ratio: float

    def as_dict(self) -> dict[str, float | int]:
        return {field: getattr(self, field) for field in self.__dataclass_fields__}


def run(profile: Profile, *, nodes: int, pods: int, topology: str, seed: int = 0) -> BenchResult:
    snapshot = ClusterSnapshot(build_nodes(synthetic_pools(nodes, topology)))
    framework = Framework(profile)
    latencies = np.zeros(pods)
    placed = multi = best_scope = 0
    for k, pod in enumerate(synthetic_pods(pods, seed=seed)):
        ranks_before = (
            snapshot.best_set_rank(snapshot.full_free_mask, pod.gpus, Requirement.of(pod))
            if pod.gpus > 1
            else None
        )
        started = time.perf_counter()
        decision = framework.schedule_one(pod, snapshot)
        latencies[k] = time.perf_counter() - started
        if decision.placement is None:
            continue
        placed += 1
        if ranks_before is not None:
            multi += 1
            chooser = snapshot.chooser(snapshot.index[decision.placement.node])
            reached = chooser.rank(decision.placement.gpu_indices)
            best_scope += reached == _best_rank_on_offer(decision, ranks_before)
    total = float(latencies.sum())
    return BenchResult(
        nodes=len(snapshot),
        gpus=int(snapshot.gpu_count.sum()),
        pods=pods,
        placed=placed,
        unschedulable=pods - placed,
        seconds=round(total, 3),
        pods_per_s=round(pods / total, 1) if total else 0.0,
        p50_ms=round(float(np.percentile(latencies, 50)) * 1000, 3),
        p99_ms=round(float(np.percentile(latencies, 99)) * 1000, 3),
        multi_gpu_placed=multi,
        best_scope_ratio=round(best_scope / multi, 4) if multi else 1.0,
    )


def _best_rank_on_offer(decision: Decision, ranks_before: IntArray) -> int:
    """The closest GPU set that any node passing every filter could have given the pod."""
    feasible = np.ones(len(ranks_before), dtype=np.bool_)
    for _, verdicts in decision.filters:
        feasible &= verdicts.passed
    return int(ranks_before[feasible].max(initial=0))
