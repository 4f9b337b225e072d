"""DefaultPreemption (PostFilter): when a pod fits nowhere, find a node where evicting a few
lower-ranked pods makes it fit, with the pod's topology needs met, not just its GPU count.

Who may be a victim is queueing.preemption.may_preempt with the LowerPriority rule: a higher
service class preempts a lower one (online over batch and opportunistic), never the reverse, and
within a class only lower priorities are victims. A victim in a gang takes its whole gang with it
(its workload is evicted as a whole).

A pod whose priority class says `preemptionPolicy: Never` preempts nobody, and a pod that already
emptied a node (`nominated_node`) waits while its victims there are still terminating, as
kube-scheduler does; pods already terminating or protected by a disruption budget are never
victims (PodIndex.evictable).

Per candidate node (only nodes whose failure preemption can resolve): every eligible pod is
forgotten from the snapshot and the profile's filters are run for the pod on that node; if it now
fits, the pods are given back most important first (highest class, highest priority, longest
running) while it still fits, so the victims left are the least important and most recently
started. The snapshot is restored exactly before returning. Among candidate nodes the one chosen
has the lowest highest-victim class, then the fewest victims (gang members counted), then the
lowest highest-victim priority, then the lowest priority sum, then the most recently started
victims.

The filters are NodeResourcesFit and GPUTopology unless the shell hands over the profile's own
(`use_filters(framework.filter)`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import (
    FilterPlugin,
    NodeVerdicts,
    PostFilterResult,
    PreFilterPlugin,
    RowFilterPlugin,
)
from scheduling.core.plugin_args import ArgReader, ProfileError
from scheduling.core.plugins import gpu_topology, node_resources_fit
from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.preemption import CLASS_RANK, may_preempt
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code
from scheduling.core.types import MILLI_PER_GPU, Placement, PodRequest, ServiceClass

NAME = "DefaultPreemption"
RULE = "LowerPriority"


def eligible(preemptor: PodRequest, victim: PodRequest) -> bool:
    return may_preempt(
        preemptor_class=preemptor.service_class,
        preemptor_priority=preemptor.priority,
        preemptor_created=preemptor.created_at,
        victim_class=victim.service_class,
        victim_priority=victim.priority,
        victim_created=victim.created_at,
        rule=RULE,
    )


class DefaultPreemption:
    def __init__(self, min_candidates_absolute: int, min_candidates_percentage: int) -> None:
        self.min_candidates_absolute = min_candidates_absolute
        self.min_candidates_percentage = min_candidates_percentage
        self.use_filters(
            [
                (node_resources_fit.NAME, node_resources_fit.new(None)),
                (gpu_topology.NAME, gpu_topology.new(None)),
            ]
        )

    def use_filters(self, filters: Sequence[tuple[str, FilterPlugin]]) -> None:
        """Judge fit with exactly the profile's filters."""
        self.filters = list(filters)
        # What each one implements, checked once (protocol checks are slow, _fits runs often).
        self._filter_kinds = [
            (name, plugin, isinstance(plugin, PreFilterPlugin), isinstance(plugin, RowFilterPlugin))
            for name, plugin in self.filters
        ]
        self._fit_filtered = any(
            isinstance(plugin, node_resources_fit.NodeResourcesFit) for _, plugin in self.filters
        )

    def post_filter(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, verdicts: NodeVerdicts
    ) -> PostFilterResult | None:
        index = snapshot.pods
        if not pod.can_preempt or (pod.nominated_node and snapshot.emptying(pod.nominated_node)):
            return None
        if not any(
            self._class_eligible(pod, service_class, priority)
            for service_class, priority in index.classes
        ):
            return None
        resolvable = np.array(
            [not unresolvable for unresolvable in verdicts.unresolvable], dtype=np.bool_
        )
        codes = verdicts.codes
        helpable = (codes > 0) & np.concatenate(([False], resolvable))[codes]
        wanted = max(
            self.min_candidates_absolute,
            len(snapshot) * self.min_candidates_percentage // 100,
        )
        best: tuple[tuple[int, ...], int, list[HeldPod]] | None = None
        found = 0
        for i in np.flatnonzero(helpable).tolist():
            pool = [
                h
                for h in index.on_node[i].values()
                if eligible(pod, h.pod) and index.evictable(h.pod.uid)
            ]
            victims = self.victims_on(pod, snapshot, i, pool)
            if victims is None:
                continue
            cost = (
                max(CLASS_RANK[v.pod.service_class] for v in victims),
                len(victims),
                max(v.pod.priority for v in victims),
                sum(v.pod.priority for v in victims),
                -max(v.sequence for v in victims),
                int(snapshot.tie_rank[i]),
            )
            if best is None or cost < best[0]:
                best = (cost, i, victims)
            found += 1
            if found >= wanted:
                break
        if best is None:
            return None
        _, node, victims = best
        return PostFilterResult(snapshot.names[node], tuple(v.pod.uid for v in victims))

    def victims_on(
        self, pod: PodRequest, snapshot: ClusterSnapshot, i: int, pool: list[HeldPod]
    ) -> list[HeldPod] | None:
        """The fewest of `pool` (pods on node i) whose eviction lets `pod` fit on node i, whole
        gangs included; None when even all of them would not do. The snapshot is left as it
        was."""
        if not pool or not self._could_fit(pod, snapshot, i, pool):
            return None
        victims = self._select(pod, snapshot, i, pool)
        return None if victims is None else self._with_gangs(snapshot, victims)

    @staticmethod
    def _class_eligible(pod: PodRequest, service_class: ServiceClass, priority: int) -> bool:
        rank, own = CLASS_RANK[service_class], CLASS_RANK[pod.service_class]
        return rank < own or (rank == own and priority < pod.priority)

    @staticmethod
    def _could_fit(pod: PodRequest, snapshot: ClusterSnapshot, i: int, pool: list[HeldPod]) -> bool:
        """Cheap necessary condition before any filter runs: with every eligible pod gone, the
        node has the CPU, memory and whole GPUs the pod asks for."""
        cpu = int(snapshot.cpu_free[i]) + sum(h.pod.cpu_milli for h in pool)
        memory = int(snapshot.memory_free[i]) + sum(h.pod.memory_mib for h in pool)
        if cpu < pod.cpu_milli or memory < pod.memory_mib:
            return False
        if pod.gpus:
            # A GPU is whole again once every pod holding part of it is gone (lent shares live
            # outside gpu_free and free nothing).
            room = snapshot.gpu_free[i].copy()
            for held in pool:
                if not held.placement.reclaimed and held.placement.gpu_indices:
                    room[list(held.placement.gpu_indices)] += held.placement.milli_per_gpu
            if int((room == MILLI_PER_GPU).sum()) < pod.gpus:
                return False
        return True

    def _select(
        self, pod: PodRequest, snapshot: ClusterSnapshot, i: int, pool: list[HeldPod]
    ) -> list[HeldPod] | None:
        removed = list(pool)
        for held in removed:
            snapshot.forget(held.pod, held.placement)
        try:
            if not self._fits(pod, snapshot, i):
                return None
            victims: list[HeldPod] = []
            # Lent shares last, smallest first: whether one is promoted depends on the owners
            # kept and on the shares promoted before it, as in the shell.
            important_first = sorted(
                pool,
                key=lambda h: (
                    h.placement.reclaimed,
                    h.placement.milli_per_gpu if h.placement.reclaimed else 0,
                    -CLASS_RANK[h.pod.service_class],
                    -h.pod.priority,
                    h.sequence,
                ),
            )
            promoted: set[int] = set()
            for held in important_first:
                kept = _as_kept(snapshot, i, held.placement, promoted)
                if self._fit_filtered and _too_full_with(pod, snapshot, i, held.pod, kept):
                    victims.append(held)  # NodeResourcesFit would refuse: no need to try
                    continue
                snapshot.assume(held.pod, kept)
                if self._fits(pod, snapshot, i):
                    if kept is not held.placement:  # back as the cluster holds it
                        snapshot.forget(held.pod, kept)
                        snapshot.assume(held.pod, held.placement)
                    removed.remove(held)
                    snapshot.pods.renumber(held.pod.uid, held.sequence)
                else:
                    snapshot.forget(held.pod, kept)
                    victims.append(held)
            return victims
        finally:
            for held in removed:
                snapshot.assume(held.pod, held.placement)
                snapshot.pods.renumber(held.pod.uid, held.sequence)

    def _fits(self, pod: PodRequest, snapshot: ClusterSnapshot, i: int) -> bool:
        state = CycleState()
        rows = np.array([i])
        for name, plugin, pre_filters, filters_rows in self._filter_kinds:
            if pre_filters:
                status = cast(PreFilterPlugin, plugin).pre_filter(state, pod, snapshot)
                if status.code is Code.SKIP:
                    state.skipped.add(name)
                    continue
                if not status.is_success:
                    return False
            if name in state.skipped:
                continue
            if filters_rows:
                if not cast(RowFilterPlugin, plugin).filter_rows(state, pod, snapshot, rows)[0]:
                    return False
            elif plugin.filter(state, pod, snapshot).codes[i] != 0:
                return False
        return True

    @staticmethod
    def _with_gangs(snapshot: ClusterSnapshot, victims: list[HeldPod]) -> list[HeldPod] | None:
        """A gang member's eviction evicts its whole gang; None when a member may not be
        evicted (terminating already, or protected)."""
        out = {v.pod.uid: v for v in victims}
        for v in victims:
            if v.pod.gang is not None:
                for member in snapshot.pods.gang_members(v.pod.gang.name):
                    out.setdefault(member.pod.uid, member)
        if not all(snapshot.pods.evictable(uid) for uid in out):
            return None
        return sorted(out.values(), key=lambda h: h.sequence)


def _too_full_with(
    pod: PodRequest, snapshot: ClusterSnapshot, i: int, other: PodRequest, placement: Placement
) -> bool:
    """With `other` back on node i as `placement`, the node would lack the CPU, memory or fully
    free GPUs `pod` asks for: NodeResourcesFit's conditions, read without assuming anything."""
    if (
        snapshot.cpu_free[i] - other.cpu_milli < pod.cpu_milli
        or snapshot.memory_free[i] - other.memory_mib < pod.memory_mib
    ):
        return True
    if not pod.gpus or placement.reclaimed or not placement.gpu_indices:
        return False  # a lent share lives outside gpu_free and takes no whole GPU
    free = snapshot.gpu_free[i]
    taken = sum(1 for gpu in placement.gpu_indices if free[gpu] == MILLI_PER_GPU)
    return int(snapshot.full_free_count[i]) - taken < pod.gpus


def new(args: Mapping[str, Any] | None) -> DefaultPreemption:
    reader = ArgReader(NAME, args)
    absolute = reader.get("minCandidateNodesAbsolute", int, 100)
    percentage = reader.get("minCandidateNodesPercentage", int, 10)
    reader.done()
    if absolute < 1 or not 0 <= percentage <= 100:
        raise ProfileError(
            f"{NAME}: minCandidateNodesAbsolute must be >= 1 and "
            "minCandidateNodesPercentage within 0..100"
        )
    return DefaultPreemption(absolute, percentage)


def _as_kept(
    snapshot: ClusterSnapshot, i: int, placement: Placement, promoted: set[int]
) -> Placement:
    """How a pod left in place will hold its GPUs once the victims are gone. A lent share on a
    GPU that keeps no owner is promoted onto the GPU's free capacity when its owners leave, while
    it fits (the shell's rule: scheduling.services.allocations._promote_lent), so it is judged
    as the owner it becomes. Judged as lent (outside the free capacity) it looked harmless: the
    preemptor found the GPU taken once the owners were gone, and preempted again."""
    if not placement.reclaimed:
        return placement
    gpus = placement.gpu_indices
    free = [int(snapshot.gpu_free[i, g]) for g in gpus]
    ownerless = all(f == MILLI_PER_GPU or g in promoted for f, g in zip(free, gpus, strict=True))
    if gpus and ownerless and min(free) >= placement.milli_per_gpu:
        promoted.update(gpus)
        return replace(placement, reclaimed=False)
    return placement
