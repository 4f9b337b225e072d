"""Where on its node a pod bound by someone else sits, so the snapshot counts what it holds.

The node is known (`spec.nodeName`); the GPUs are the ones our own bind annotated
(`gpusched.io/gpu-ids`, `gpusched.io/mig-slots`) when we placed it, else the device plugin chose and
the API does not say: we count the lowest free GPUs (or, for a share, the fullest GPU it fits on).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kube.translate import (
    ANNOTATION_GPU_IDS,
    ANNOTATION_GPU_SHARE,
    ANNOTATION_MIG_SLOTS,
    PodTemplate,
)
from scheduling.core.snapshot import ClusterSnapshot, OverCommitError, charge_cpu
from scheduling.core.types import MILLI_PER_GPU, Placement, PodRequest


def single_strategy_ask(snapshot: ClusterSnapshot, node: str, ask: PodTemplate) -> PodTemplate:
    """On a MIG `single`-strategy node `nvidia.com/gpu` counts MIG devices: ask for those."""
    i = snapshot.index.get(node)
    if i is None or not ask.resources.gpus or (snapshot.gpu_free[i] >= 0).any():
        return ask
    profiles = [p for p, slots in snapshot.mig_slots_free[i].items() if slots]
    profiles += [p for p in snapshot.nodes[i].gpus[0].mig_layout if p not in profiles]
    if len(set(profiles)) != 1:
        return ask
    resources = replace(
        ask.resources, mig_profile=profiles[0], mig_count=ask.resources.gpus, gpus=0
    )
    return replace(ask, resources=resources)


def placement_on(
    snapshot: ClusterSnapshot, node: str, pod: PodRequest, annotations: Mapping[str, str]
) -> Placement | None:
    """The pod's placement on `node`, or None when the node is unknown or cannot hold it."""
    i = snapshot.index.get(node)
    if i is None:
        return None
    if snapshot.cpu_free[i] < pod.cpu_milli or snapshot.memory_free[i] < pod.memory_mib:
        return None
    free = snapshot.gpu_free[i]
    gpus: tuple[int, ...] = ()
    milli = 0
    mig: tuple[tuple[int, int], ...] = ()
    noted = _indices(annotations.get(ANNOTATION_GPU_IDS, ""))
    if pod.gpus:
        whole = [g for g in range(len(free)) if free[g] == MILLI_PER_GPU]
        if noted is not None and len(noted) == pod.gpus and set(noted) <= set(whole):
            gpus = tuple(noted)
        elif len(whole) >= pod.gpus:
            gpus = tuple(whole[: pod.gpus])
        else:
            return None
        milli = MILLI_PER_GPU
    elif pod.gpu_milli:
        fits = [
            g for g in range(len(free)) if snapshot.gpu_shareable[i, g] and free[g] >= pod.gpu_milli
        ]
        if noted is not None and len(noted) == 1 and noted[0] in fits:
            gpus = (noted[0],)
        elif fits:
            gpus = (min(fits, key=lambda g: (int(free[g]), g)),)
        else:
            return None
        milli = pod.gpu_milli
    elif pod.mig_count:
        slots = [(s.gpu, s.slot) for s in snapshot.mig_slots_free[i].get(pod.mig_profile, [])]
        wanted = _slots(annotations.get(ANNOTATION_MIG_SLOTS, ""))
        if wanted is not None and len(wanted) == pod.mig_count and set(wanted) <= set(slots):
            mig = tuple(wanted)
        elif len(slots) >= pod.mig_count:
            mig = tuple(sorted(slots)[: pod.mig_count])
        else:
            return None
    topology = snapshot.chooser(i).topology
    near = [topology.gpu_numa[g] for g in gpus] + [topology.gpu_numa[g] for g, _ in mig]
    numa_count = topology.numa_count
    try:
        cpu = charge_cpu(snapshot.numa_cpu_free[i, :numa_count], near, pod.cpu_milli)
    except OverCommitError:
        return None
    return Placement(
        node=node, gpu_indices=gpus, milli_per_gpu=milli, mig_slots=mig, numa_cpu_milli=cpu
    )


def _indices(text: str) -> list[int] | None:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        return None
    return values or None


def _slots(text: str) -> list[tuple[int, int]] | None:
    try:
        pairs = [part.split(":") for part in text.split(",") if part.strip()]
        values = [(int(gpu), int(slot)) for gpu, slot in pairs]
    except ValueError:
        return None
    return values or None


def annotations_for(placement: Placement) -> dict[str, str]:
    """What our bind writes on the pod: the GPU ids (and MIG slots, or the share) it was given."""
    out: dict[str, str] = {}
    gpus = list(placement.gpu_indices) + [gpu for gpu, _ in placement.mig_slots]
    if gpus:
        out[ANNOTATION_GPU_IDS] = ",".join(str(g) for g in sorted(set(gpus)))
    if placement.mig_slots:
        out[ANNOTATION_MIG_SLOTS] = ",".join(f"{g}:{s}" for g, s in placement.mig_slots)
    if placement.gpu_indices and 0 < placement.milli_per_gpu < MILLI_PER_GPU:
        out[ANNOTATION_GPU_SHARE] = str(placement.milli_per_gpu)
    return out
