"""GPUAllocator: the last Reserve plugin. It settles whatever earlier Reserve plugins left open:
whole GPUs (lowest free indices), a GPU share (best fit: the fullest GPU that still has room),
MIG slots (the GPU with the fewest free slots of that profile) and the NUMA nodes the pod's CPU
is charged to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import AllocationDraft
from scheduling.core.plugin_args import ArgReader
from scheduling.core.snapshot import BoolArray, ClusterSnapshot, IntArray, charge_cpu
from scheduling.core.status import Code, Status
from scheduling.core.types import MILLI_PER_GPU, PodRequest, ServiceClass

NAME = "GPUAllocator"


class GPUAllocator:
    def reserve(
        self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot, draft: AllocationDraft
    ) -> Status:
        i = draft.node
        if draft.gpu_indices is None:
            if pod.gpus:
                free = np.flatnonzero(snapshot.gpu_free[i] == MILLI_PER_GPU)[: pod.gpus]
                draft.gpu_indices, draft.milli_per_gpu = tuple(int(g) for g in free), MILLI_PER_GPU
            elif pod.gpu_milli:
                # An opportunistic share borrows idle allocated capacity first, keeping what is
                # free for the tenants that pay for it; everything else takes free capacity.
                share = None
                if pod.service_class is ServiceClass.OPPORTUNISTIC:
                    lendable = snapshot.gpu_reclaimable[i]
                    share = best_fit(lendable, snapshot.gpu_shareable[i], pod.gpu_milli)
                    draft.reclaimed = share is not None
                if share is None:
                    share = best_fit_share(snapshot, i, pod.gpu_milli)
                draft.gpu_indices = (share,) if share is not None else ()
                draft.milli_per_gpu = pod.gpu_milli
            else:
                draft.gpu_indices = ()
        if draft.mig_slots is None:
            draft.mig_slots = _pick_mig_slots(snapshot, i, pod) if pod.mig_count else ()
        if (
            len(draft.gpu_indices) != pod.gpus + (1 if pod.gpu_milli else 0)
            or len(draft.mig_slots) != pod.mig_count
        ):
            return Status.of(Code.UNSCHEDULABLE, "the node's free GPUs changed", plugin=NAME)
        if draft.numa_cpu_milli is None:
            topology = snapshot.chooser(i).topology
            gpus = list(draft.gpu_indices) + [gpu for gpu, _ in draft.mig_slots]
            gpu_numas = [topology.gpu_numa[g] for g in gpus]
            draft.numa_cpu_milli = charge_cpu(snapshot.numa_cpu_free[i], gpu_numas, pod.cpu_milli)
        return Status.success(NAME)


def borrows(pod: PodRequest, snapshot: ClusterSnapshot, node: int) -> bool:
    """Whether the allocator will place this share on lent capacity of `node`: plugins that pick
    a share's GPU by their own measure leave such pods to it."""
    return (
        pod.service_class is ServiceClass.OPPORTUNISTIC
        and bool(pod.gpu_milli)
        and int(snapshot.max_reclaimable[node]) >= pod.gpu_milli
    )


def best_fit_share(snapshot: ClusterSnapshot, node: int, milli: int) -> int | None:
    """The shared GPU with the least free milli that still fits `milli`; lowest index on ties."""
    return best_fit(snapshot.gpu_free[node], snapshot.gpu_shareable[node], milli)


def best_fit(room: IntArray, allowed: BoolArray, milli: int) -> int | None:
    """Among allowed GPUs, the one with the least room that still fits `milli`; lowest index on
    ties; None when none fits."""
    fits = allowed & (room >= milli)
    if not fits.any():
        return None
    return int(np.argmin(np.where(fits, room, np.iinfo(np.int64).max)))


def _pick_mig_slots(
    snapshot: ClusterSnapshot, node: int, pod: PodRequest
) -> tuple[tuple[int, int], ...]:
    slots = snapshot.mig_slots_free[node].get(pod.mig_profile, [])
    per_gpu: dict[int, int] = {}
    for slot in slots:
        per_gpu[slot.gpu] = per_gpu.get(slot.gpu, 0) + 1
    ordered = sorted(slots, key=lambda s: (per_gpu[s.gpu], s.gpu, s.slot))
    return tuple((s.gpu, s.slot) for s in ordered[: pod.mig_count])


def new(args: Mapping[str, Any] | None) -> GPUAllocator:
    ArgReader(NAME, args).done()
    return GPUAllocator()
