"""What dcgm-exporter reports for one GPU given the pods that really hold it, for both simulated
sides (the database simulator and the simulated Kubernetes' kubelets): utilization follows each
holder's profile, shared GPUs repeat their values once per holder (as dcgm-exporter does), MIG
instances report the engine ratios only (no GPU_UTIL on MIG, dcgm-exporter#216).

Contention: when the holders of one GPU want more than the whole GPU (their busy shares add up
past 1), each progresses slower and loses `elapsed x (1 - 1/demand)` seconds of work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from telemetry.exposition import GpuState

IDLE_POWER_W = 60.0
BUSY_POWER_W = 300.0


@dataclass(frozen=True)
class Holder:
    """One pod's hold on a GPU right now."""

    pod: str
    namespace: str
    uid: str
    busy: float  # share of what it holds in use now, 0..1
    memory: float  # share of the framebuffer it fills, 0..1
    milli: int = 1000  # how much of the GPU it holds
    container: str = "main"


def demand(holders: Sequence[Holder]) -> float:
    return sum(h.busy * h.milli / 1000 for h in holders)


def lost_seconds(wanted: float, elapsed_s: float) -> float:
    """Work lost by each holder of a GPU its holders want `wanted` (>1: over-subscribed) of."""
    return elapsed_s * (1.0 - 1.0 / wanted) if wanted > 1.0 else 0.0


def with_pod(state: GpuState, holder: Holder | None) -> GpuState:
    if holder is None:
        return state
    return replace(
        state,
        pod=holder.pod,
        namespace=holder.namespace,
        container=holder.container,
        pod_uid=holder.uid,
    )


def whole_gpu_states(base: GpuState, memory_mib: int, holders: Sequence[Holder]) -> list[GpuState]:
    busy = min(1.0, demand(holders))
    fb_used = min(float(memory_mib), sum(h.memory * h.milli / 1000 * memory_mib for h in holders))
    state = replace(
        base,
        gpu_util=round(busy * 100),
        mem_copy_util=round(busy * 40),
        gr_engine_active=busy,
        tensor_active=busy * 0.7,
        dram_active=busy * 0.5,
        fb_used_mib=round(fb_used),
        fb_free_mib=round(memory_mib - fb_used),
        power_w=IDLE_POWER_W + BUSY_POWER_W * busy,
        temp_c=32.0 + 40.0 * busy,
    )
    if not holders:
        return [state]
    return [with_pod(state, h) for h in holders]


def mig_instance_state(
    base: GpuState, memory_mib: int, profile: str, slot: int, holder: Holder | None
) -> GpuState:
    busy = holder.busy if holder else 0.0
    state = replace(
        base,
        gpu_util=None,
        mem_copy_util=None,
        gr_engine_active=busy,
        tensor_active=busy * 0.5,
        dram_active=busy * 0.6,
        fb_used_mib=0.0,
        fb_free_mib=float(memory_mib),
        mig_profile=profile,
        mig_instance=slot,
    )
    return with_pod(state, holder)
