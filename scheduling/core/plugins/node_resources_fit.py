"""NodeResourcesFit: does the node have the CPU, memory and GPUs (whole, shared or MIG) the pod
asks for,
is it allowed there (selector, taints, cordon, quarantine, GPU model), and how full would it be
afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Any

import numpy as np

from scheduling.core.columns import Columns, ShapeCache
from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import CodeArray, FloatArray, IntArray, NodeVerdicts
from scheduling.core.plugin_args import ArgReader, ProfileError
from scheduling.core.snapshot import BoolArray, ClusterSnapshot
from scheduling.core.status import Status
from scheduling.core.types import (
    GPU_MILLI_RESOURCE,
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    PodRequest,
    ServiceClass,
)

NAME = "NodeResourcesFit"
ERR_CORDONED = "node(s) were unschedulable"
ERR_QUARANTINED = "node(s) were quarantined (their recorded state contradicts their capacity)"
ERR_RESERVED = "node(s) were reserved for a waiting gang, large pod or preemptor"
ERR_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
ERR_TAINT = "node(s) had untolerated taint"
ERR_MODEL = "node(s) didn't have an allowed GPU model"
STRATEGIES = ("MostAllocated", "LeastAllocated")
DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1, GPU_RESOURCE: 3}


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class _FilterColumns(Columns):
    """Per node, for one pod shape: the code of the first condition the node fails (0: none)."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.codes: CodeArray = np.zeros(size, dtype=np.uint8)
        self.reasons: tuple[str, ...] = ()
        self.unresolvable: tuple[bool, ...] = ()


class NodeResourcesFit:
    """Filter answers from per-shape columns (scheduling.core.columns): a cycle evaluates the
    conditions only on the nodes changed since the shape was last filtered."""

    def __init__(self, strategy: str, weights: Mapping[str, int]) -> None:
        self.strategy = strategy
        self.weights = dict(weights)
        self._filters = ShapeCache(_FilterColumns)

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> Status:
        return Status.success(NAME)

    def filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> NodeVerdicts:
        columns = self._filters.get(_filter_key(pod), snapshot)
        stale = columns.stale(snapshot)
        if len(stale):
            conditions = _conditions(pod, snapshot)
            if not columns.reasons:
                columns.reasons = tuple(reason for reason, _, _ in conditions)
                columns.unresolvable = tuple(unresolvable for _, unresolvable, _ in conditions)
            codes = np.zeros(len(stale), dtype=np.uint8)
            # Last condition first, so a node keeps the code of the first condition it fails.
            for code in range(len(conditions), 0, -1):
                codes[conditions[code - 1][2](stale)] = code
            columns.codes[stale] = codes
            columns.mark(snapshot, stale)
        codes = columns.codes.copy()
        reasons, unresolvable = columns.reasons, columns.unresolvable
        # Reservations are per pod (the batch sets them before each attempt), so they are not
        # cached with the shape: a node held for another workload fails only where all else fits.
        blocked = snapshot.reservation_blocked
        if blocked.any():
            reasons, unresolvable = (*reasons, ERR_RESERVED), (*unresolvable, True)
            codes[blocked & (codes == 0)] = len(reasons)
        return NodeVerdicts(codes, reasons, unresolvable)

    def filter_rows(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, rows: IntArray
    ) -> BoolArray:
        passed = ~snapshot.reservation_blocked[rows]
        for _, _, fails in _conditions(pod, snapshot):
            passed &= ~fails(rows)
        return passed

    def score(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, candidates: IntArray
    ) -> FloatArray:
        """kube-scheduler's MostAllocated/LeastAllocated: weighted mean of per-resource utilization
        after placing the pod; resources a node does not have are left out of its mean."""
        columns = (
            ("cpu", snapshot.cpu_capacity, snapshot.cpu_free, pod.cpu_milli),
            ("memory", snapshot.memory_capacity, snapshot.memory_free, pod.memory_mib),
            (
                GPU_RESOURCE,
                snapshot.gpu_capacity_milli,
                snapshot.gpu_free_total,
                pod.gpu_demand_milli,
            ),
        )
        total = np.zeros(len(candidates))
        weight_sum = np.zeros(len(candidates))
        for resource, capacity_all, free_all, request in columns:
            weight = self.weights.get(resource, 0)
            if not weight:
                continue
            capacity = capacity_all[candidates]
            has = capacity > 0
            used = (capacity - free_all[candidates] + request) / np.where(has, capacity, 1)
            utilization = np.clip(used, 0.0, 1.0)
            if self.strategy == "LeastAllocated":
                utilization = 1.0 - utilization
            total += np.where(has, weight * utilization, 0.0)
            weight_sum += np.where(has, weight, 0)
        scores: FloatArray = 100.0 * total / np.where(weight_sum > 0, weight_sum, 1)
        return scores


Condition = tuple[str, bool, Callable[[IntArray], BoolArray]]  # reason, unresolvable, failing rows


def _filter_key(pod: PodRequest) -> Hashable:
    """Everything of the pod the filter reads."""
    return (
        pod.cpu_milli,
        pod.memory_mib,
        pod.gpus,
        pod.gpu_milli,
        pod.service_class is ServiceClass.OPPORTUNISTIC,
        pod.mig_profile,
        pod.mig_count,
        pod.gpu_models if pod.wants_gpu else frozenset(),
        tuple(sorted(pod.node_selector.items())),
        pod.tolerations,
    )


def _conditions(pod: PodRequest, snapshot: ClusterSnapshot) -> list[Condition]:
    """The filter's conditions in order, each a function of node rows that says which fail."""
    s = snapshot
    conditions: list[Condition] = [
        (ERR_CORDONED, True, lambda rows: s.cordoned[rows]),
        (ERR_QUARANTINED, True, lambda rows: s.quarantined[rows]),
    ]
    if pod.node_selector:
        selected = s.selector_mask(pod.node_selector)
        conditions.append((ERR_SELECTOR, True, lambda rows: ~selected[rows]))
    tolerated = s.tolerated_mask(pod.tolerations)
    conditions.append((ERR_TAINT, True, lambda rows: ~tolerated[rows]))
    if pod.wants_gpu and pod.gpu_models:
        allowed = s.model_mask(pod.gpu_models)
        conditions.append((ERR_MODEL, True, lambda rows: ~allowed[rows]))
    cpu, memory = pod.cpu_milli, pod.memory_mib
    conditions += [
        (insufficient("cpu"), True, lambda rows: s.cpu_capacity[rows] < cpu),
        (insufficient("memory"), True, lambda rows: s.memory_capacity[rows] < memory),
        (insufficient("cpu"), False, lambda rows: s.cpu_free[rows] < cpu),
        (insufficient("memory"), False, lambda rows: s.memory_free[rows] < memory),
    ]
    if pod.gpus:
        gpus = pod.gpus
        conditions += [
            (
                insufficient(GPU_RESOURCE),
                True,
                lambda rows: s.gpu_capacity_milli[rows] // 1000 < gpus,
            ),
            (insufficient(GPU_RESOURCE), False, lambda rows: s.full_free_count[rows] < gpus),
        ]
    elif pod.gpu_milli:
        milli = pod.gpu_milli
        borrows = pod.service_class is ServiceClass.OPPORTUNISTIC  # may use lendable capacity

        def no_shared_gpu(rows: IntArray) -> BoolArray:
            shared: BoolArray = np.logical_not(s.gpu_shareable[rows].any(axis=1))
            return shared

        def no_room(rows: IntArray) -> BoolArray:
            room = s.max_share_free[rows]
            if borrows:
                room = np.maximum(room, s.max_reclaimable[rows])
            fails: BoolArray = room < milli
            return fails

        conditions += [
            (insufficient(GPU_MILLI_RESOURCE), True, no_shared_gpu),
            (insufficient(GPU_MILLI_RESOURCE), False, no_room),
        ]
    elif pod.mig_count:
        resource = MIG_RESOURCE_PREFIX + pod.mig_profile
        column = s.mig_column(pod.mig_profile)
        count = pod.mig_count
        if column is None:
            conditions.append(
                (insufficient(resource), True, lambda rows: np.ones(len(rows), dtype=np.bool_))
            )
        else:
            conditions.append(
                (insufficient(resource), False, lambda rows: s.mig_free[rows, column] < count)
            )
    return conditions


def new(args: Mapping[str, Any] | None) -> NodeResourcesFit:
    reader = ArgReader(NAME, args)
    strategy_doc = reader.get("scoringStrategy", dict, {})
    reader.done()
    strategy_reader = ArgReader(f"{NAME}.scoringStrategy", strategy_doc)
    strategy = strategy_reader.get("type", str, "MostAllocated")
    resources = strategy_reader.get("resources", list, [])
    strategy_reader.done()
    if strategy not in STRATEGIES:
        raise ProfileError(
            f"{NAME}: scoringStrategy.type {strategy!r} is not one of {', '.join(STRATEGIES)}"
        )
    weights = dict(DEFAULT_WEIGHTS) if not resources else {}
    for k, item in enumerate(resources):
        entry = ArgReader(
            f"{NAME}.scoringStrategy.resources[{k}]", item if isinstance(item, dict) else {}
        )
        name = entry.get("name", str, "")
        weights[name] = entry.get("weight", int, 1)
        entry.done()
        if name not in DEFAULT_WEIGHTS:
            raise ProfileError(
                f"{NAME}: scoringStrategy.resources[{k}].name {name!r} is not a known resource"
            )
    return NodeResourcesFit(strategy, weights)
