"""Which GPUs of one node to give a k-GPU pod, and how good the best such set is.

Per (requirement, k) a table answers for every free-GPU bitmask: the rank of the best set and the
set, so the scheduler scores all nodes with one array lookup and Reserve picks ids with a list hit.
Up to 8 GPUs the table covers all 256 masks from the start; larger nodes (10- and 16-GPU servers)
have 2**G masks, so their table is filled for the masks that occur, as they occur, and kept.

A set is ranked by closeness first (NVLink on every pair > one PCIe switch > one NUMA node > node),
then by the rest of the key in `_best_of`: it keeps large free blocks whole (Koordinator's 8/4/2
partitions, weights 10000/100/1) and, all else equal, takes the GPUs least connected to what stays
free (HAMi's worst-card rule for 1-GPU pods), so well-connected sets remain for the pods that need
them. The key is evaluated with numpy over all candidate sets of a mask at once.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from itertools import combinations

import numpy as np
import numpy.typing as npt

from scheduling.core.topology import NodeTopology
from scheduling.core.types import PodRequest, TopologyPolicy, TopologyScope

MAX_GPUS_PER_NODE = 16
ENUMERATED_GPUS = 8  # up to this many GPUs a table covers every free mask when built
RANK_NVLINK, RANK_PCIE, RANK_NUMA, RANK_NODE = 4, 3, 2, 1
SCOPE_OF_RANK = {
    RANK_NVLINK: TopologyScope.NVLINK,
    RANK_PCIE: TopologyScope.PCIE,
    RANK_NUMA: TopologyScope.NUMA,
    RANK_NODE: TopologyScope.NODE,
}
FILTERING_POLICIES = (TopologyPolicy.RESTRICTED, TopologyPolicy.SINGLE_NUMA_NODE)
_UNKNOWN = -1  # rank of a mask a lazily filled table has not evaluated yet
_PAIRS_PER_CHUNK = 1 << 20  # bounds the (mask, candidate set) pairs evaluated at once

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class Requirement:
    """What a GPU set must satisfy: a scope, plus one NUMA node for `single-numa-node`."""

    scope: TopologyScope = TopologyScope.NODE
    same_numa: bool = False

    @classmethod
    def of(
        cls, pod: PodRequest, *, default_policy: TopologyPolicy = TopologyPolicy.NONE
    ) -> Requirement:
        """What the pod's topology policy enforces (`default_policy` when the pod names none):
        `restricted` and `single-numa-node` keep the set within the pod's scope, one NUMA node
        unless it names another; `none` and `best-effort` enforce nothing."""
        policy = pod.topology_policy or default_policy
        if policy not in FILTERING_POLICIES:
            return cls()
        scope = pod.topology_scope or TopologyScope.NUMA
        return cls(scope, policy is TopologyPolicy.SINGLE_NUMA_NODE)


NO_REQUIREMENT = Requirement()


@dataclass(frozen=True, slots=True)
class _Candidates:
    """Every k-GPU set of a G-GPU node, in lexicographic order, with what does not depend on the
    free mask."""

    sets: IntArray  # (C, k) GPU indices
    bits: IntArray  # (C,) bitmask of each set
    rank: IntArray  # (C,) closeness rank
    same_numa: BoolArray
    bottleneck: IntArray  # weakest pair score
    pair_sum: IntArray
    within: IntArray  # sum of pair scores over ordered pairs inside the set


@dataclass(slots=True)
class SetTable:
    """For one (requirement, k): per free-GPU bitmask, the rank of the best set (0: none) and the
    set. In a lazily filled table a mask not evaluated yet has rank -1."""

    rank: npt.NDArray[np.int8]
    sets: list[tuple[int, ...] | None]
    order: IntArray  # per candidate: its standing on the mask-independent part of the key
    allowed: BoolArray  # per candidate: meets the requirement
    lazy: bool


class GpuSetChooser:
    def __init__(self, topology: NodeTopology) -> None:
        if topology.gpu_count > MAX_GPUS_PER_NODE:
            raise ValueError(f"nodes with more than {MAX_GPUS_PER_NODE} GPUs are not supported")
        self.topology = topology
        self.gpu_count = topology.gpu_count
        self._scores: IntArray = np.array(topology.pair_scores, dtype=np.int64).reshape(
            self.gpu_count, self.gpu_count
        )
        n = self.gpu_count
        self._nvlink: BoolArray = np.array(
            [[i != j and topology.is_nvlink(i, j) for j in range(n)] for i in range(n)],
            dtype=np.bool_,
        ).reshape(n, n)
        self._numa: IntArray = np.array(topology.gpu_numa, dtype=np.int64)
        self._switch: IntArray = np.array(topology.gpu_switch, dtype=np.int64)
        blocks = _free_blocks(topology)
        self._block_masks: IntArray = np.array([b for b, _ in blocks], dtype=np.int64)
        self._block_weights: IntArray = np.array([w for _, w in blocks], dtype=np.int64)
        self._bit_of: IntArray = 1 << np.arange(n, dtype=np.int64)
        self._candidates: dict[int, _Candidates] = {}
        self._tables: dict[tuple[Requirement, int, bool], SetTable] = {}

    def table(self, requirement: Requirement, k: int, *, prefer_same_numa: bool = True) -> SetTable:
        key = (requirement, k, prefer_same_numa)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = self._new_table(requirement, k, prefer_same_numa)
        return table

    def ranks(
        self,
        masks: IntArray,
        k: int,
        requirement: Requirement = NO_REQUIREMENT,
        *,
        prefer_same_numa: bool = True,
    ) -> npt.NDArray[np.int8]:
        """The rank of the best k-GPU set within each free mask (0: none)."""
        table = self.table(requirement, k, prefer_same_numa=prefer_same_numa)
        if table.lazy:
            self._fill(table, k, masks)
        return table.rank[masks]

    def choose(
        self,
        free_mask: int,
        k: int,
        requirement: Requirement = NO_REQUIREMENT,
        *,
        prefer_same_numa: bool = True,
    ) -> tuple[int, ...] | None:
        table = self.table(requirement, k, prefer_same_numa=prefer_same_numa)
        if table.lazy:
            self._fill(table, k, np.array([free_mask], dtype=np.int64))
        return table.sets[free_mask]

    def rank(self, gpus: tuple[int, ...]) -> int:
        if len(gpus) <= 1:
            return RANK_NVLINK
        if all(self.topology.is_nvlink(i, j) for i, j in combinations(gpus, 2)):
            return RANK_NVLINK
        if len({self.topology.gpu_switch[i] for i in gpus}) == 1:
            return RANK_PCIE
        return RANK_NUMA if len({self.topology.gpu_numa[i] for i in gpus}) == 1 else RANK_NODE

    def scope_of(self, gpus: tuple[int, ...]) -> TopologyScope:
        return SCOPE_OF_RANK[self.rank(gpus)]

    def satisfies(self, gpus: tuple[int, ...], requirement: Requirement) -> bool:
        rank = np.array([self.rank(gpus)], dtype=np.int64)
        same_numa = np.array([len({self.topology.gpu_numa[i] for i in gpus}) <= 1])
        return bool(_allowed(rank, same_numa, requirement)[0])

    # --- tables ---------------------------------------------------------------------------------

    def _new_table(self, requirement: Requirement, k: int, prefer_same_numa: bool) -> SetTable:
        size = 1 << self.gpu_count
        lazy = self.gpu_count > ENUMERATED_GPUS
        if not 0 < k <= self.gpu_count:
            none = np.zeros(0, dtype=np.int64)
            return SetTable(np.zeros(size, np.int8), [None] * size, none, none.astype(bool), False)
        c = self._candidates_of(k)
        numa_local = c.same_numa & prefer_same_numa
        # Dense standing on (rank, NUMA-local, bottleneck, pair sum): the part of the key that does
        # not depend on which other GPUs are free.
        keys = np.stack((c.rank, numa_local.astype(np.int64), c.bottleneck, c.pair_sum))
        static = np.lexsort(keys[::-1])
        changes = np.r_[True, (np.diff(keys[:, static], axis=1) != 0).any(axis=0)]
        order = np.empty(len(static), dtype=np.int64)
        order[static] = np.cumsum(changes) - 1  # equal keys stand equal
        table = SetTable(
            rank=np.full(size, _UNKNOWN if lazy else 0, dtype=np.int8),
            sets=[None] * size,
            order=order,
            allowed=_allowed(c.rank, c.same_numa, requirement),
            lazy=lazy,
        )
        if not lazy:
            self._evaluate(table, k, np.arange(size, dtype=np.int64))
        return table

    def _fill(self, table: SetTable, k: int, masks: IntArray) -> None:
        todo = np.unique(masks[table.rank[masks] == _UNKNOWN])
        if len(todo):
            self._evaluate(table, k, todo)

    def _evaluate(self, table: SetTable, k: int, masks: IntArray) -> None:
        table.rank[masks] = 0
        if not len(table.order):
            return
        c = self._candidates_of(k)
        for chunk in _chunks(masks, max(1, _PAIRS_PER_CHUNK // len(c.bits))):
            self._best_of(table, c, chunk)

    def _best_of(self, table: SetTable, c: _Candidates, masks: IntArray) -> None:
        """The best allowed candidate inside each mask. Beyond the mask-independent standing: keep
        the most (weighted) free blocks whole, then take the GPUs least linked to what stays free,
        then the lexicographically first set."""
        inside = ((c.bits[None, :] & ~masks[:, None]) == 0) & table.allowed[None, :]
        row, cand = np.nonzero(inside)
        if not len(row):
            return
        rest = masks[row] & ~c.bits[cand]
        kept = (
            (rest[:, None] & self._block_masks[None, :]) == self._block_masks[None, :]
        ) @ self._block_weights
        # Links from each GPU to every free GPU of its mask, then minus those inside the set.
        free_bits = (masks[:, None] & self._bit_of[None, :]) != 0
        to_free = free_bits.astype(np.int64) @ self._scores.T  # (masks, G)
        to_rest = to_free[row[:, None], c.sets[cand]].sum(axis=1) - c.within[cand]
        ranked = np.lexsort((-cand, -to_rest, kept, table.order[cand], row))
        last = ranked[np.r_[row[ranked][1:] != row[ranked][:-1], True]]
        for r, best in zip(row[last].tolist(), cand[last].tolist(), strict=True):
            mask = int(masks[r])
            table.rank[mask] = c.rank[best]
            table.sets[mask] = tuple(int(g) for g in c.sets[best])

    def _candidates_of(self, k: int) -> _Candidates:
        found = self._candidates.get(k)
        if found is not None:
            return found
        sets = _combinations(self.gpu_count, k)
        a, b = np.triu_indices(k, 1)
        upper = self._scores[sets[:, a], sets[:, b]]
        lower = self._scores[sets[:, b], sets[:, a]]
        first = sets[:, :1]
        same_numa = (self._numa[sets] == self._numa[first]).all(axis=1)
        same_switch = (self._switch[sets] == self._switch[first]).all(axis=1)
        all_nvlink = self._nvlink[sets[:, a], sets[:, b]].all(axis=1)
        rank = np.where(
            all_nvlink,
            RANK_NVLINK,
            np.where(same_switch, RANK_PCIE, np.where(same_numa, RANK_NUMA, RANK_NODE)),
        ).astype(np.int64)
        found = self._candidates[k] = _Candidates(
            sets=sets,
            bits=self._bit_of[sets].sum(axis=1),
            rank=rank,
            same_numa=same_numa,
            bottleneck=upper.min(axis=1, initial=1 << 40) if k > 1 else np.zeros(len(sets), int),
            pair_sum=upper.sum(axis=1),
            within=upper.sum(axis=1) + lower.sum(axis=1),
        )
        return found


def _allowed(rank: IntArray, same_numa: BoolArray, requirement: Requirement) -> BoolArray:
    ok: BoolArray = same_numa.copy() if requirement.same_numa else np.ones(len(rank), np.bool_)
    match requirement.scope:
        case TopologyScope.NODE:
            pass
        case TopologyScope.NUMA:
            ok &= same_numa
        case TopologyScope.PCIE:
            # NVLink inside one NUMA node is at least as close as a shared PCIe switch.
            ok &= (rank == RANK_PCIE) | ((rank == RANK_NVLINK) & same_numa)
        case TopologyScope.NVLINK:
            ok &= rank == RANK_NVLINK
    return ok


@cache
def _combinations(n: int, k: int) -> IntArray:
    sets: IntArray = np.array(list(combinations(range(n), k)), dtype=np.int64).reshape(-1, k)
    sets.flags.writeable = False
    return sets


def _chunks(values: IntArray, size: int) -> Iterator[IntArray]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _bits(gpus: tuple[int, ...]) -> int:
    mask = 0
    for i in gpus:
        mask |= 1 << i
    return mask


def _free_blocks(topology: NodeTopology) -> tuple[tuple[int, int], ...]:
    """Aligned blocks worth keeping whole, with their weight: the node, each NUMA node, each PCIe
    switch and each NVLink island smaller than the node (bridged pairs); 8 GPUs weigh 10000, 4 weigh
    100, 2 weigh 1 (16 weigh 1000000)."""
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
