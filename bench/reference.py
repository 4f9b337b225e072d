"""The naive reference `bench_scheduler --reference` measures the profile against (issue 21): fit
plus a same-NUMA GPU choice, vectorized with numpy over every node for every pod, and nothing else:
no topology tree, no fragmentation, no load, no cache between pods, no explanation. The same
cluster, the same pod stream, timed the same way (one call per pod).

Per pod: the nodes with the CPU and memory, and either k fully free GPUs (preferring nodes that
have them on one NUMA node), a shareable GPU with room for the share, or nothing more (CPU-only);
the first such node wins (first fit). Whole GPUs: the lowest free ones of the NUMA node with the
fewest free GPUs that still holds k (else the lowest free ones anywhere); a share: the fullest
shareable GPU with room.
"""

from __future__ import annotations

import time

import numpy as np
import numpy.typing as npt

from scheduling.core.types import MILLI_PER_GPU, NodeSpec, PodRequest

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class NaiveCluster:
    def __init__(self, nodes: list[NodeSpec]) -> None:
        width = max((len(node.gpus) for node in nodes), default=1) or 1
        n = len(nodes)
        self.cpu_free: IntArray = np.array([node.cpu_milli for node in nodes], dtype=np.int64)
        self.memory_free: IntArray = np.array([node.memory_mib for node in nodes], dtype=np.int64)
        self.gpu_free: IntArray = np.full((n, width), -1, dtype=np.int64)  # -1: no such GPU
        self.shareable = np.zeros((n, width), dtype=np.bool_)
        self.gpu_numa: IntArray = np.full((n, width), -1, dtype=np.int64)
        for i, node in enumerate(nodes):
            numa = node.shape.gpu_numa
            for gpu in node.gpus:
                self.gpu_free[i, gpu.index] = MILLI_PER_GPU
                self.shareable[i, gpu.index] = gpu.sharing.shareable
                self.gpu_numa[i, gpu.index] = numa[gpu.index]
        self.numa_ids = range(int(self.gpu_numa.max(initial=0)) + 1)

    def place(self, pod: PodRequest) -> tuple[int, tuple[int, ...]] | None:
        """Choose a node and GPUs for `pod` and take them; None when no node fits."""
        fits = (self.cpu_free >= pod.cpu_milli) & (self.memory_free >= pod.memory_mib)
        if pod.gpus:
            full = self.gpu_free == MILLI_PER_GPU
            per_numa = np.stack([(full & (self.gpu_numa == u)).sum(axis=1) for u in self.numa_ids])
            fits &= full.sum(axis=1) >= pod.gpus
            local = fits & (per_numa.max(axis=0) >= pod.gpus)
            chosen = np.flatnonzero(local if local.any() else fits)
        elif pod.gpu_milli:
            room = np.where(self.shareable, self.gpu_free, -1) >= pod.gpu_milli
            chosen = np.flatnonzero(fits & room.any(axis=1))
        else:
            chosen = np.flatnonzero(fits)
        if not len(chosen):
            return None
        i = int(chosen[0])
        gpus = self._gpus(i, pod)
        self.cpu_free[i] -= pod.cpu_milli
        self.memory_free[i] -= pod.memory_mib
        self.gpu_free[i, list(gpus)] -= pod.gpu_milli or MILLI_PER_GPU
        return i, gpus

    def _gpus(self, i: int, pod: PodRequest) -> tuple[int, ...]:
        free = self.gpu_free[i]
        if pod.gpu_milli:
            room = np.where(self.shareable[i] & (free >= pod.gpu_milli), free, MILLI_PER_GPU + 1)
            return (int(np.argmin(room)),)
        if not pod.gpus:
            return ()
        full = free == MILLI_PER_GPU
        counts = [int((full & (self.gpu_numa[i] == u)).sum()) for u in self.numa_ids]
        holding = [u for u in self.numa_ids if counts[u] >= pod.gpus]
        if holding:
            numa = min(holding, key=lambda u: (counts[u], u))
            full &= self.gpu_numa[i] == numa
        return tuple(int(g) for g in np.flatnonzero(full)[: pod.gpus])


def run_reference(
    nodes: list[NodeSpec], pods: list[PodRequest]
) -> tuple[int, FloatArray, FloatArray]:
    """(pods placed, per-pod wall-clock and CPU seconds) of the naive reference on `nodes`."""
    cluster = NaiveCluster(nodes)
    latencies = np.zeros(len(pods))
    cpu = np.zeros(len(pods))
    placed = 0
    for k, pod in enumerate(pods):
        started, cpu_started = time.perf_counter(), time.thread_time()
        outcome = cluster.place(pod)
        latencies[k] = time.perf_counter() - started
        cpu[k] = time.thread_time() - cpu_started
        placed += outcome is not None
    return placed, latencies, cpu
