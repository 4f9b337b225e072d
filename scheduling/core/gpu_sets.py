"""Which GPUs of one node to give a k-GPU pod, and how good the best such set is.

For a topology with G <= 8 GPUs every free-GPU bitmask is enumerated once per (requirement, k), so
the scheduler scores all nodes with one array lookup and Reserve picks ids with a dictionary hit.

A set is ranked by closeness first (NVLink on every pair > one PCIe switch > one NUMA node > node),
then by the rest of the key in `_SetKey`: it keeps large free blocks whole (Koordinator's 8/4/2
partitions, weights 10000/100/1) and, all else equal, takes the GPUs least connected to what stays
free (HAMi's worst-card rule for 1-GPU pods), so well-connected sets remain for the pods that need
them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from scheduling.core.topology import NodeTopology
from scheduling.core.types import PodRequest, TopologyPolicy, TopologyScope

MAX_GPUS_PER_NODE = 8
RANK_NVLINK, RANK_PCIE, RANK_NUMA, RANK_NODE = 4, 3, 2, 1
SCOPE_OF_RANK = {
    RANK_NVLINK: TopologyScope.NVLINK,
    RANK_PCIE: TopologyScope.PCIE,
    RANK_NUMA: TopologyScope.NUMA,
    RANK_NODE: TopologyScope.NODE,
}


@dataclass(frozen=True, slots=True)
class Requirement:
    """What a GPU set must satisfy: a scope, plus one NUMA node for `single-numa-node`."""

    scope: TopologyScope = TopologyScope.NODE
    same_numa: bool = False

    @classmethod
    def of(cls, pod: PodRequest) -> Requirement:
        """What the pod's topology policy enforces; `none` and `best-effort` enforce nothing."""
        if not pod.topology_filters:
            return cls()
        return cls(pod.effective_scope, pod.topology_policy is TopologyPolicy.SINGLE_NUMA_NODE)


NO_REQUIREMENT = Requirement()


class _SetKey(NamedTuple):
    rank: int
    numa_local: bool
    bottleneck: int
    pair_sum: int
    kept_blocks: int
    neg_links_to_rest: int
    neg_indices: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SetTable:
    """For one (requirement, k): per free-GPU bitmask, the rank of the best set (0: none) and the
    set."""

    rank: npt.NDArray[np.int8]
    sets: tuple[tuple[int, ...] | None, ...]


class GpuSetChooser:
    def __init__(self, topology: NodeTopology) -> None:
        if topology.gpu_count > MAX_GPUS_PER_NODE:
            raise ValueError(f"nodes with more than {MAX_GPUS_PER_NODE} GPUs are not supported")
        self.topology = topology
        self.gpu_count = topology.gpu_count
        self._scores = topology.pair_scores
        self._blocks = _free_blocks(topology)
        self._tables: dict[tuple[Requirement, int, bool], SetTable] = {}

    def table(self, requirement: Requirement, k: int, *, prefer_same_numa: bool = True) -> SetTable:
        key = (requirement, k, prefer_same_numa)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = self._build(requirement, k, prefer_same_numa)
        return table

    def choose(
        self,
        free_mask: int,
        k: int,
        requirement: Requirement = NO_REQUIREMENT,
        *,
        prefer_same_numa: bool = True,
    ) -> tuple[int, ...] | None:
        return self.table(requirement, k, prefer_same_numa=prefer_same_numa).sets[free_mask]

    def rank(self, gpus: tuple[int, ...]) -> int:
        if len(gpus) <= 1:
            return RANK_NVLINK
        if all(self.topology.is_nvlink(i, j) for i, j in combinations(gpus, 2)):
            return RANK_NVLINK
        if len({self.topology.gpu_switch[i] for i in gpus}) == 1:
            return RANK_PCIE
        return RANK_NUMA if self._same_numa(gpus) else RANK_NODE

    def scope_of(self, gpus: tuple[int, ...]) -> TopologyScope:
        return SCOPE_OF_RANK[self.rank(gpus)]

    def satisfies(self, gpus: tuple[int, ...], requirement: Requirement) -> bool:
        same_numa = self._same_numa(gpus)
        if requirement.same_numa and not same_numa:
            return False
        rank = self.rank(gpus)
        match requirement.scope:
            case TopologyScope.NODE:
                return True
            case TopologyScope.NUMA:
                return same_numa
            case TopologyScope.PCIE:
                # NVLink inside one NUMA node is at least as close as a shared PCIe switch.
                return rank == RANK_PCIE or (rank == RANK_NVLINK and same_numa)
            case TopologyScope.NVLINK:
                return rank == RANK_NVLINK

    def _same_numa(self, gpus: tuple[int, ...]) -> bool:
        return len({self.topology.gpu_numa[i] for i in gpus}) <= 1

    def _build(self, requirement: Requirement, k: int, prefer_same_numa: bool) -> SetTable:
        size = 1 << self.gpu_count
        rank = np.zeros(size, dtype=np.int8)
        sets: list[tuple[int, ...] | None] = [None] * size
        for mask in range(size):
            free = tuple(i for i in range(self.gpu_count) if mask >> i & 1)
            if len(free) < k or k == 0:
                continue
            best: tuple[_SetKey, tuple[int, ...]] | None = None
            for gpus in combinations(free, k):
                if not self.satisfies(gpus, requirement):
                    continue
                key = self._key(gpus, mask, prefer_same_numa)
                if best is None or key > best[0]:
                    best = (key, gpus)
            if best is not None:
                rank[mask] = best[0].rank
                sets[mask] = best[1]
        return SetTable(rank=rank, sets=tuple(sets))

    def _key(self, gpus: tuple[int, ...], mask: int, prefer_same_numa: bool) -> _SetKey:
        pairs = [self._scores[i][j] for i, j in combinations(gpus, 2)]
        rest_mask = mask & ~_bits(gpus)
        rest = [j for j in range(self.gpu_count) if rest_mask >> j & 1]
        return _SetKey(
            rank=self.rank(gpus),
            numa_local=prefer_same_numa and self._same_numa(gpus),
            bottleneck=min(pairs, default=0),
            pair_sum=sum(pairs),
            kept_blocks=sum(weight for block, weight in self._blocks if block & rest_mask == block),
            neg_links_to_rest=-sum(self._scores[i][j] for i in gpus for j in rest),
            neg_indices=tuple(-i for i in gpus),
        )


def _bits(gpus: tuple[int, ...]) -> int:
    mask = 0
    for i in gpus:
        mask |= 1 << i
    return mask


def _free_blocks(topology: NodeTopology) -> tuple[tuple[int, int], ...]:
    """Aligned blocks worth keeping whole, with their weight: the node, each NUMA node, each PCIe
    switch and each NVLink island smaller than the node (bridged pairs); 8 GPUs weigh 10000, 4 weigh
    100, 2 weigh 1."""
    n = topology.gpu_count
    groups: set[tuple[int, ...]] = {tuple(range(n))}
    for attribute in (topology.gpu_numa, topology.gpu_switch):
        for value in set(attribute):
            groups.add(tuple(i for i in range(n) if attribute[i] == value))
    groups.update(_nvlink_islands(topology))
    return tuple(
        (_bits(group), 100 ** (len(group).bit_length() - 2))
        for group in sorted(groups)
        if len(group) >= 2
    )


def _nvlink_islands(topology: NodeTopology) -> list[tuple[int, ...]]:
    n = topology.gpu_count
    seen: set[int] = set()
    islands = []
    for start in range(n):
        if start in seen:
            continue
        island, frontier = {start}, [start]
        while frontier:
            i = frontier.pop()
            for j in range(n):
                if j not in island and topology.is_nvlink(i, j):
                    island.add(j)
                    frontier.append(j)
        seen |= island
        islands.append(tuple(sorted(island)))
    return islands
