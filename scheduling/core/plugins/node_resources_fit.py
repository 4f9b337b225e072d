"""NodeResourcesFit: does the node have the CPU, memory and GPUs (whole, shared or MIG) the pod
asks for,
is it allowed there (selector, taints, cordon, quarantine, GPU model), and how full would it be
afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import FloatArray, IntArray, NodeVerdicts, VerdictBuilder
from scheduling.core.plugin_args import ArgReader, ProfileError
from scheduling.core.snapshot import ClusterSnapshot
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
ERR_RESERVED = "node(s) were reserved for a waiting gang or large pod"
ERR_SELECTOR = "node(s) didn't match Pod's node affinity/selector"
ERR_TAINT = "node(s) had untolerated taint"
ERR_MODEL = "node(s) didn't have an allowed GPU model"
STRATEGIES = ("MostAllocated", "LeastAllocated")
DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1, GPU_RESOURCE: 3}


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class NodeResourcesFit:
    def __init__(self, strategy: str, weights: Mapping[str, int]) -> None:
        self.strategy = strategy
        self.weights = dict(weights)

    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> Status:
        return Status.success(NAME)

    def filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> NodeVerdicts:
        verdicts = VerdictBuilder(len(snapshot))
        verdicts.fail(snapshot.cordoned, ERR_CORDONED, unresolvable=True)
        verdicts.fail(snapshot.quarantined, ERR_QUARANTINED, unresolvable=True)
        verdicts.fail(snapshot.reservation_blocked, ERR_RESERVED, unresolvable=True)
        if pod.node_selector:
            verdicts.fail(
                ~snapshot.selector_mask(pod.node_selector), ERR_SELECTOR, unresolvable=True
            )
        verdicts.fail(~snapshot.tolerated_mask(pod.tolerations), ERR_TAINT, unresolvable=True)
        if pod.wants_gpu and pod.gpu_models:
            verdicts.fail(~snapshot.model_mask(pod.gpu_models), ERR_MODEL, unresolvable=True)
        verdicts.fail(snapshot.cpu_capacity < pod.cpu_milli, insufficient("cpu"), unresolvable=True)
        verdicts.fail(
            snapshot.memory_capacity < pod.memory_mib, insufficient("memory"), unresolvable=True
        )
        verdicts.fail(snapshot.cpu_free < pod.cpu_milli, insufficient("cpu"))
        verdicts.fail(snapshot.memory_free < pod.memory_mib, insufficient("memory"))
        if pod.gpus:
            whole = snapshot.gpu_capacity_milli // 1000
            verdicts.fail(whole < pod.gpus, insufficient(GPU_RESOURCE), unresolvable=True)
            verdicts.fail(snapshot.full_free_count < pod.gpus, insufficient(GPU_RESOURCE))
        elif pod.gpu_milli:
            no_shared = np.logical_not(snapshot.gpu_shareable.any(axis=1))
            verdicts.fail(no_shared, insufficient(GPU_MILLI_RESOURCE), unresolvable=True)
            room = snapshot.max_share_free
            if pod.service_class is ServiceClass.OPPORTUNISTIC:  # may also use lendable capacity
                room = np.maximum(room, snapshot.max_reclaimable)
            verdicts.fail(room < pod.gpu_milli, insufficient(GPU_MILLI_RESOURCE))
        elif pod.mig_count:
            resource = MIG_RESOURCE_PREFIX + pod.mig_profile
            column = snapshot.mig_column(pod.mig_profile)
            if column is None:
                verdicts.fail(
                    np.ones(len(snapshot), dtype=np.bool_),
                    insufficient(resource),
                    unresolvable=True,
                )
            else:
                verdicts.fail(snapshot.mig_free[:, column] < pod.mig_count, insufficient(resource))
        return verdicts.build()

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
