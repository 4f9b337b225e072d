"""The cluster as numpy arrays, built once and then updated in place as pods are assumed onto nodes.

Filter and Score plugins read whole columns (one entry per node), so a scheduling cycle costs a few
dozen array operations whatever the cluster size; only Reserve looks at the GPUs of the one chosen
node. `generation[i]` grows each time node i changes (a placement, a release, a quarantine; every
node's with new load or reclaimable measurements), so plugins may cache per-node results between
cycles (scheduling.core.columns).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from scheduling.core.gpu_sets import MAX_GPUS_PER_NODE, GpuSetChooser, Requirement
from scheduling.core.pod_index import PodIndex
from scheduling.core.topology import NodeTopology
from scheduling.core.types import (
    MILLI_PER_GPU,
    NodeSpec,
    Placement,
    PodRequest,
    SharingMode,
    TaintEffect,
    Toleration,
)

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class OverCommitError(RuntimeError):
    """Assuming a placement would take more than a node has; the placement is refused and nothing
    changes."""


@dataclass(frozen=True, slots=True)
class MigSlot:
    gpu: int
    slot: int
    profile: str


class ClusterSnapshot:
    def __init__(self, nodes: Iterable[NodeSpec]) -> None:
        self.nodes: list[NodeSpec] = list(nodes)
        self.names = [node.name for node in self.nodes]
        self.index = {name: i for i, name in enumerate(self.names)}
        if len(self.index) != len(self.names):
            raise ValueError("node names must be unique")
        n = len(self.nodes)
        for node in self.nodes:
            if len(node.gpus) > MAX_GPUS_PER_NODE:
                raise ValueError(
                    f"node {node.name}: more than {MAX_GPUS_PER_NODE} GPUs is not supported"
                )
        # A node without topology facts is scheduled on a uniform guess (its `shape`: one NUMA
        # node, no shared switch, no NVLink); `topology_known` tells the two apart.
        topologies = [node.shape for node in self.nodes]
        self.topology_known: BoolArray = np.array(
            [node.topology is not None or not node.gpus for node in self.nodes], dtype=np.bool_
        )
        self.any_topology_guessed = not bool(self.topology_known.all())
        self.max_numa = max((t.numa_count for t in topologies), default=1)
        # GPU columns: as many as the largest node has, so 8-GPU clusters keep 8-wide arrays.
        g = self.gpu_slots = max((len(node.gpus) for node in self.nodes), default=1) or 1

        self.cpu_free: IntArray = np.array([node.cpu_milli for node in self.nodes], dtype=np.int64)
        self.memory_free: IntArray = np.array(
            [node.memory_mib for node in self.nodes], dtype=np.int64
        )
        self.numa_cpu_free: IntArray = np.zeros((n, self.max_numa), dtype=np.int64)
        self.gpu_free: IntArray = np.full(
            (n, g), -1, dtype=np.int64
        )  # -1: no such GPU, or MIG-partitioned
        self.gpu_shareable: BoolArray = np.zeros((n, g), dtype=np.bool_)
        self.gpu_count: IntArray = np.array([len(node.gpus) for node in self.nodes], dtype=np.int64)
        self.cordoned: BoolArray = np.array([node.cordoned for node in self.nodes], dtype=np.bool_)
        # Nodes whose recorded state contradicts their capacity: nothing more goes there.
        self.quarantined: BoolArray = np.zeros(n, dtype=np.bool_)
        # Nodes reserved for another gang or large pod, for the pod being tried now (set by the
        # batch around each attempt: scheduling.core.queueing.backfill).
        self.reservation_blocked: BoolArray = np.zeros(n, dtype=np.bool_)
        self.generation: IntArray = np.zeros(n, dtype=np.int64)
        self.tie_rank: IntArray = np.arange(n, dtype=np.int64)

        self.models = sorted({node.gpu_model for node in self.nodes})
        model_ids = {model: k for k, model in enumerate(self.models)}
        self.model_id: IntArray = np.array(
            [model_ids[node.gpu_model] for node in self.nodes], dtype=np.int64
        )

        self.choosers: list[GpuSetChooser] = []
        chooser_ids: dict[NodeTopology, int] = {}
        self.topology_id: IntArray = np.zeros(n, dtype=np.int64)
        self.numa_gpu_mask: IntArray = np.zeros((n, self.max_numa), dtype=np.int64)

        self.mig_profiles = sorted(
            {p for node in self.nodes for gpu in node.gpus for p in gpu.mig_layout}
        )
        self._mig_column = {profile: k for k, profile in enumerate(self.mig_profiles)}
        self.mig_free: IntArray = np.zeros((n, len(self.mig_profiles)), dtype=np.int64)
        self.mig_slots_free: list[dict[str, list[MigSlot]]] = [{} for _ in range(n)]

        for i, (node, topology) in enumerate(zip(self.nodes, topologies, strict=True)):
            self._load_node(i, node, topology, chooser_ids)

        self.cpu_capacity: IntArray = self.cpu_free.copy()
        self.memory_capacity: IntArray = self.memory_free.copy()
        self.gpu_capacity_milli: IntArray = (self.gpu_free >= 0).sum(axis=1) * MILLI_PER_GPU
        self._bit_weights: IntArray = 1 << np.arange(g, dtype=np.int64)
        self.whole_gpu_mask: IntArray = ((self.gpu_free >= 0) * self._bit_weights).sum(axis=1)
        self.topology_groups: list[IntArray] = [
            np.flatnonzero(self.topology_id == t) for t in range(len(self.choosers))
        ]
        self.full_free_mask: IntArray = np.zeros(n, dtype=np.int64)
        self.gpu_free_total: IntArray = np.zeros(n, dtype=np.int64)
        # Estimated busy share of each GPU (1.0 = one GPU fully busy): measured by DCGM at the last
        # refresh_load, plus the expected load of every pod assumed since. Until telemetry is
        # refreshed it is just the sum of the pods' expectations, and the age says "never measured".
        self.gpu_load: FloatArray = np.zeros((n, g), dtype=np.float64)
        self.node_load: FloatArray = np.zeros(n, dtype=np.float64)  # gpu_load summed per node
        self.load_age_s: FloatArray = np.full(n, np.inf)
        self.load_fresh_for_s = 0.0  # nothing is fresh until measured
        self._count_stale_load()
        # Milli of each shared GPU allocated to others but idle enough to lend to opportunistic
        # pods (scheduling.core.reclaim.lendable_milli), what is lent of it, and what is left:
        # lendable - lent on shared GPUs. Lent milli are outside gpu_free: owners keep their GPUs.
        self.gpu_lendable: IntArray = np.zeros((n, g), dtype=np.int64)
        self.gpu_lent: IntArray = np.zeros((n, g), dtype=np.int64)
        self.gpu_reclaimable: IntArray = np.zeros((n, g), dtype=np.int64)
        self.max_reclaimable: IntArray = np.zeros(n, dtype=np.int64)
        self.full_free_count: IntArray = np.zeros(n, dtype=np.int64)
        self.max_share_free: IntArray = np.zeros(n, dtype=np.int64)
        self._refresh_gpu_columns(slice(None))
        self._mask_cache: dict[object, BoolArray] = {}
        self.pods = PodIndex(n)  # which pods are held where (kept by assume/forget)

    def _load_node(
        self,
        i: int,
        node: NodeSpec,
        topology: NodeTopology,
        chooser_ids: dict[NodeTopology, int],
    ) -> None:
        if topology.gpu_count != len(node.gpus):
            raise ValueError(
                f"node {node.name}: topology has {topology.gpu_count} GPUs, "
                f"node has {len(node.gpus)}"
            )
        if topology not in chooser_ids:
            chooser_ids[topology] = len(self.choosers)
            self.choosers.append(GpuSetChooser(topology))
        self.topology_id[i] = chooser_ids[topology]
        shares = node.numa_cpu_shares()
        self.numa_cpu_free[i, : len(shares)] = shares
        for gpu in node.gpus:
            self.numa_gpu_mask[i, topology.gpu_numa[gpu.index]] |= 1 << gpu.index
            if gpu.sharing is SharingMode.MIG:
                for slot, profile in enumerate(gpu.mig_layout):
                    self.mig_slots_free[i].setdefault(profile, []).append(
                        MigSlot(gpu.index, slot, profile)
                    )
                    self.mig_free[i, self._mig_column[profile]] += 1
            else:
                self.gpu_free[i, gpu.index] = MILLI_PER_GPU
                self.gpu_shareable[i, gpu.index] = gpu.sharing.shareable

    def _refresh_gpu_row(self, i: int) -> None:
        """_refresh_gpu_columns for one node, in plain Python: for 8 or 16 GPUs that is several
        times cheaper than a dozen numpy calls, and assume/forget (preemption's trials too) pay
        it every time."""
        free = self.gpu_free[i].tolist()
        shareable = self.gpu_shareable[i].tolist()
        lendable = self.gpu_lendable[i].tolist()
        lent = self.gpu_lent[i].tolist()
        full_mask = full_count = max_share = total = max_reclaim = 0
        reclaimable = [0] * len(free)
        for g, milli in enumerate(free):
            if milli == MILLI_PER_GPU:
                full_mask |= 1 << g
                full_count += 1
            if milli > 0:
                total += milli
            if shareable[g]:
                max_share = max(max_share, milli)
                reclaimable[g] = max(lendable[g] - lent[g], 0)
                max_reclaim = max(max_reclaim, reclaimable[g])
        self.full_free_mask[i] = full_mask
        self.full_free_count[i] = full_count
        self.max_share_free[i] = max_share
        self.gpu_free_total[i] = total
        self.gpu_reclaimable[i] = reclaimable
        self.max_reclaimable[i] = max_reclaim

    def _refresh_gpu_columns(self, rows: slice) -> None:
        free = self.gpu_free[rows]
        full = free == MILLI_PER_GPU
        self.full_free_mask[rows] = (full * self._bit_weights).sum(axis=-1)
        self.full_free_count[rows] = full.sum(axis=-1)
        self.max_share_free[rows] = np.where(self.gpu_shareable[rows], free, 0).max(
            axis=-1, initial=0
        )
        self.gpu_free_total[rows] = free.clip(0).sum(axis=-1)
        self.gpu_reclaimable[rows] = np.where(
            self.gpu_shareable[rows], (self.gpu_lendable[rows] - self.gpu_lent[rows]).clip(0), 0
        )
        self.max_reclaimable[rows] = self.gpu_reclaimable[rows].max(axis=-1, initial=0)

    def __len__(self) -> int:
        return len(self.nodes)

    def chooser(self, i: int) -> GpuSetChooser:
        return self.choosers[int(self.topology_id[i])]

    def best_set_rank(
        self, masks: IntArray, k: int, requirement: Requirement, rows: IntArray | None = None
    ) -> IntArray:
        """Per node (or per node in `rows`): the rank of the best k-GPU set meeting `requirement`
        within the node's GPU bitmask, 0 when there is none. One table lookup per topology."""
        rows = np.arange(len(self)) if rows is None else rows
        ranks = np.zeros(len(rows), dtype=np.int64)
        topology_of_row = self.topology_id[rows]
        if len(rows) < len(self.choosers):
            # A few rows (a warm cache's stale nodes, one preemption trial): one lookup per row
            # beats one pass per topology.
            for j, (i, topology) in enumerate(
                zip(rows.tolist(), topology_of_row.tolist(), strict=True)
            ):
                chooser = self.choosers[topology]
                if k <= chooser.gpu_count:
                    ranks[j] = chooser.ranks(masks[i : i + 1], k, requirement)[0]
            return ranks
        for topology, chooser in enumerate(self.choosers):
            if k > chooser.gpu_count:
                continue
            selected = np.flatnonzero(topology_of_row == topology)
            ranks[selected] = chooser.ranks(masks[rows[selected]], k, requirement)
        return ranks

    def refresh_reclaimable(self, lendable: IntArray) -> None:
        """Replace what owners' idle capacity may lend to opportunistic pods, GPU by GPU (shared
        GPUs only); what is lent already is subtracted."""
        if lendable.shape != self.gpu_lendable.shape:
            raise ValueError("lendable milli must cover every node and GPU slot of the snapshot")
        lendable = np.maximum(lendable, 0)
        changed = (lendable != self.gpu_lendable).any(axis=1)
        self.gpu_lendable = lendable
        self._refresh_gpu_columns(slice(None))
        # Only the nodes whose lendable capacity changed: a cycle's columns stay warm elsewhere.
        self.generation[changed] += 1

    def stop_lending(self, i: int, gpus: Sequence[int]) -> None:
        """These GPUs of node `i` lend nothing more (an online pod now holds them) until the next
        refresh of what owners may lend says otherwise."""
        if self.gpu_lendable[i, list(gpus)].any():
            self.gpu_lendable[i, list(gpus)] = 0
            self._refresh_gpu_row(i)
            self.generation[i] += 1

    def refresh_load(self, load: FloatArray, age_s: FloatArray, fresh_for_s: float) -> None:
        """Replace the load estimate with measurements (see scheduling.core.load), which count as
        fresh for `fresh_for_s` (the one freshness window telemetry uses too). The arrays are
        new ones (the snapshot's own are compared with them to find the nodes that changed)."""
        if load.shape != self.gpu_load.shape or age_s.shape != self.load_age_s.shape:
            raise ValueError("load arrays must cover every node and GPU slot of the snapshot")
        node_load = np.where(self.gpu_free >= 0, load, 0.0).sum(axis=1)
        was_stale = self.load_stale
        changed = (
            (load != self.gpu_load).any(axis=1)
            | (node_load != self.node_load)
            | (age_s != self.load_age_s)
        )
        self.gpu_load = load
        self.node_load = node_load
        self.load_age_s = age_s
        self.load_fresh_for_s = fresh_for_s
        self._count_stale_load()
        # Only the nodes whose load, age or staleness changed: the others' columns stay warm
        # (without telemetry, or with nodes that report nothing new, that is most of them).
        self.generation[changed | (self.load_stale != was_stale)] += 1

    def _count_stale_load(self) -> None:
        self.load_stale: BoolArray = self.load_age_s > self.load_fresh_for_s
        self.load_stale_count = int(self.load_stale.sum())

    def mig_column(self, profile: str) -> int | None:
        return self._mig_column.get(profile)

    # Masks that depend only on static node facts are computed once per distinct pod constraint.

    def selector_mask(self, selector: Mapping[str, str]) -> BoolArray:
        key = ("selector", tuple(sorted(selector.items())))
        mask = self._mask_cache.get(key)
        if mask is None:
            mask = np.array(
                [all(node.labels.get(k) == v for k, v in selector.items()) for node in self.nodes],
                dtype=np.bool_,
            )
            self._mask_cache[key] = mask
        return mask

    def tolerated_mask(self, tolerations: tuple[Toleration, ...]) -> BoolArray:
        key = ("tolerations", tolerations)
        mask = self._mask_cache.get(key)
        if mask is None:
            mask = np.array(
                [
                    all(
                        taint.effect is TaintEffect.PREFER_NO_SCHEDULE
                        or any(t.tolerates(taint) for t in tolerations)
                        for taint in node.taints
                    )
                    for node in self.nodes
                ],
                dtype=np.bool_,
            )
            self._mask_cache[key] = mask
        return mask

    def model_mask(self, models: frozenset[str]) -> BoolArray:
        key = ("models", models)
        mask = self._mask_cache.get(key)
        if mask is None:
            allowed = [k for k, model in enumerate(self.models) if model in models]
            mask = np.isin(self.model_id, allowed)
            self._mask_cache[key] = mask
        return mask

    def cordon(self, node: str, cordoned: bool) -> None:
        """The node's cordon set or lifted, nothing else about it changed. `nodes` becomes a new
        list, so what was built from the old one (and copies sharing it) can tell."""
        i = self.index[node]
        self.nodes = [
            *self.nodes[:i],
            replace(self.nodes[i], cordoned=cordoned),
            *self.nodes[i + 1 :],
        ]
        self.cordoned[i] = cordoned
        self.generation[i] += 1

    def quarantine(self, node: str) -> None:
        i = self.index[node]
        self.quarantined[i] = True
        self.generation[i] += 1

    # Assume / forget: the only mutations of what nodes hold. Both keep every derived column
    # consistent.

    def emptying(self, node: str) -> bool:
        """Some pod on the node is still terminating: a preemption there is under way."""
        i = self.index.get(node)
        return i is not None and any(uid in self.pods.terminating for uid in self.pods.on_node[i])

    def assume(self, pod: PodRequest, placement: Placement) -> None:
        i = self.index[placement.node]
        numa_count = self.chooser(i).topology.numa_count
        if len(placement.numa_cpu_milli) > numa_count and any(
            placement.numa_cpu_milli[numa_count:]
        ):
            raise OverCommitError(
                f"pod {pod.uid} is charged to NUMA nodes the node does not have ({numa_count})"
            )
        held = [*placement.gpu_indices, *(gpu for gpu, _ in placement.mig_slots)]
        if any(gpu >= len(self.nodes[i].gpus) for gpu in held):
            raise OverCommitError(f"pod {pod.uid} holds a GPU {placement.node} does not report")
        numa_cpu = np.zeros(self.max_numa, dtype=np.int64)
        charged = min(numa_count, len(placement.numa_cpu_milli))
        numa_cpu[:charged] = placement.numa_cpu_milli[:charged]
        if sum(placement.numa_cpu_milli) != pod.cpu_milli:
            raise ValueError(
                f"pod {pod.uid}: placement charges {sum(placement.numa_cpu_milli)} CPU milli, "
                f"the pod asks {pod.cpu_milli}"
            )
        gpus = list(placement.gpu_indices)
        # A lent share is judged by the database's bound (lent <= one GPU), not by what is
        # lendable now: a snapshot rebuilt from committed state must take every lent pod back.
        if placement.reclaimed:
            room = MILLI_PER_GPU - self.gpu_lent[i, gpus]
        else:
            room = self.gpu_free[i, gpus]
        if (
            self.cpu_free[i] < pod.cpu_milli
            or self.memory_free[i] < pod.memory_mib
            or (self.numa_cpu_free[i] < numa_cpu).any()
            or (room < placement.milli_per_gpu).any()
            or not self._mig_slots_are_free(i, placement)
        ):
            raise OverCommitError(f"pod {pod.uid} does not fit on {placement.node} any more")
        self._apply(i, pod, placement, numa_cpu, sign=1)
        self._take_mig_slots(i, placement)
        self.pods.add(i, pod, placement)

    def forget(self, pod: PodRequest, placement: Placement) -> None:
        i = self.index[placement.node]
        numa_cpu = np.zeros(self.max_numa, dtype=np.int64)
        numa_cpu[: len(placement.numa_cpu_milli)] = placement.numa_cpu_milli
        self._apply(i, pod, placement, numa_cpu, sign=-1)
        for gpu, slot in placement.mig_slots:
            profile = self.nodes[i].gpus[gpu].mig_layout[slot]
            self.mig_slots_free[i].setdefault(profile, []).append(MigSlot(gpu, slot, profile))
            self.mig_free[i, self._mig_column[profile]] += 1
        self.pods.remove(pod)

    def _apply(
        self, i: int, pod: PodRequest, placement: Placement, numa_cpu: IntArray, *, sign: int
    ) -> None:
        self.cpu_free[i] -= sign * pod.cpu_milli
        self.memory_free[i] -= sign * pod.memory_mib
        self.numa_cpu_free[i] -= sign * numa_cpu
        if placement.gpu_indices:
            gpus = list(placement.gpu_indices)
            if placement.reclaimed:
                self.gpu_lent[i, gpus] += sign * placement.milli_per_gpu
            else:
                self.gpu_free[i, gpus] -= sign * placement.milli_per_gpu
            # A released pod may have used less than expected: the load never drops below zero.
            self.gpu_load[i, gpus] = np.maximum(
                self.gpu_load[i, gpus] + sign * pod.expected_load, 0.0
            )
            self.node_load[i] = self.gpu_load[i, self.gpu_free[i] >= 0].sum()
            self._refresh_gpu_row(i)
        self.generation[i] += 1

    def _mig_slots_are_free(self, i: int, placement: Placement) -> bool:
        if not placement.mig_slots:
            return True
        free = {(s.gpu, s.slot) for slots in self.mig_slots_free[i].values() for s in slots}
        return all(slot in free for slot in placement.mig_slots)

    def _take_mig_slots(self, i: int, placement: Placement) -> None:
        for gpu, slot in placement.mig_slots:
            profile = self.nodes[i].gpus[gpu].mig_layout[slot]
            self.mig_slots_free[i][profile] = [
                s for s in self.mig_slots_free[i][profile] if (s.gpu, s.slot) != (gpu, slot)
            ]
            self.mig_free[i, self._mig_column[profile]] -= 1


def charge_cpu(free: IntArray, preferred: Iterable[int], amount: int) -> tuple[int, ...]:
    """Take `amount` CPU milli from a node's NUMA nodes: the preferred ones first (where the pod's
    GPUs are), then whichever has the most left. Returns the amount taken from each NUMA node."""
    taken = [0] * len(free)
    left = amount
    order = list(dict.fromkeys(preferred)) + sorted(
        range(len(free)), key=lambda u: (-int(free[u]), u)
    )
    for u in order:
        if left <= 0:
            break
        take = min(left, max(0, int(free[u]) - taken[u]))
        taken[u] += take
        left -= take
    if left > 0:  # callers check node-level CPU first, so this only happens on inconsistent input
        raise OverCommitError(f"{amount} CPU milli does not fit in the NUMA nodes' free CPU")
    return tuple(taken)
