"""Reclaim: lend the idle part of allocated GPUs to opportunistic pods, and take it back.

On a shared GPU (time-slicing, MPS) whose holders are all batch or opportunistic, the owners' idle
capacity `max(0, allocated - p95(used) * (1 + margin))` (Koordinator's ProdReclaimable shape,
scheduler-anchors.md §1) may host opportunistic shares. A GPU an online pod holds lends nothing:
an online pod placed on a GPU that lends gets it to itself, its lent pods evicted in the same batch
(scheduling.core.queueing.batch); where evicted pods terminate first, the online pod waits for them
as a preemptor waits for its victims, so it never runs beside borrowed capacity.

DCGM reports a time-sliced GPU as a whole (dcgm-exporter repeats the GPU's values for every pod on
it), so the owners' use is the GPU's busy less what the lent pods are expected to use, and never
less than what the owners used while they held the GPU alone: lending must not make the owners
look idler than they were.

When the owners' use comes back and the lent milli exceed what may be lent, the newest lent pods
are evicted once the GPU has been over-lent for a grace period (a burst shorter than the grace
costs nobody anything); at once when an online pod holds the GPU.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from scheduling.core.efficiency import reclaimable_milli
from scheduling.core.types import MILLI_PER_GPU

DEFAULT_MARGIN = 0.2
DEFAULT_GRACE_S = 120.0
GpuKey = tuple[str, int]  # (node, GPU index)
ONLINE_HOLDS_THE_GPU = "an online pod now holds the GPU"


def gpu_name(gpu: GpuKey) -> str:
    return f"{gpu[0]}/gpu{gpu[1]}"


def reclaimed_reason(gpus: str, why: str) -> str:
    """An eviction's reason when lent capacity is taken back (the outbox, events and measures
    recognise reclaim by its prefix)."""
    return f"Reclaimed: GPU {gpus}: {why}"


@dataclass(frozen=True, slots=True)
class LentPod:
    uid: str
    milli: int
    expected_load: float  # GPUs it is expected to keep busy (its tenant's usage ratio x share)
    bound_s: float  # when it was placed: the newest go first


@dataclass(frozen=True, slots=True)
class GpuLending:
    """One shared GPU as reclaim sees it."""

    owner_milli: int  # held by batch and opportunistic pods on their own (not lent) capacity
    online: bool  # an online pod holds part of it
    owner_used: float | None  # p95 of what the owners keep busy, in GPUs; None: not measured
    lent: tuple[LentPod, ...] = ()

    @property
    def lent_milli(self) -> int:
        return sum(pod.milli for pod in self.lent)


def owner_use(
    busy_p95: float | None, lent: tuple[LentPod, ...], alone_p95: float | None
) -> float | None:
    """What the owners of a GPU keep busy, from the GPU's busy p95 (which includes the lent pods)
    and what the owners were measured to use while nothing was lent (None: unknown)."""
    if busy_p95 is None:
        return alone_p95
    measured = max(0.0, busy_p95 - sum(pod.expected_load for pod in lent))
    return measured if alone_p95 is None else max(measured, alone_p95)


def lendable_milli(gpu: GpuLending, margin: float = DEFAULT_MARGIN) -> int:
    """What the GPU's owners may lend: nothing while an online pod holds it or before the owners'
    use was measured."""
    if gpu.online or gpu.owner_used is None or gpu.owner_milli <= 0:
        return 0
    return min(
        MILLI_PER_GPU,
        reclaimable_milli(gpu.owner_milli, gpu.owner_used * MILLI_PER_GPU, margin),
    )


@dataclass(frozen=True, slots=True)
class Reclaim:
    gpu: GpuKey
    pod: LentPod
    reason: str

    @property
    def gpu_name(self) -> str:
        return gpu_name(self.gpu)


@dataclass
class ReclaimTracker:
    """Remembers since when each GPU has been over-lent, and names the pods to evict."""

    grace_s: float = DEFAULT_GRACE_S
    margin: float = DEFAULT_MARGIN
    over_lent_since: dict[GpuKey, float] = field(default_factory=dict)

    def victims(self, gpus: Mapping[GpuKey, GpuLending], now_s: float) -> list[Reclaim]:
        result: list[Reclaim] = []
        for key, gpu in gpus.items():
            lent, allowed = gpu.lent_milli, lendable_milli(gpu, self.margin)
            if lent <= allowed:
                self.over_lent_since.pop(key, None)
                continue
            since = self.over_lent_since.setdefault(key, now_s)
            if not gpu.online and now_s - since < self.grace_s:
                continue
            if gpu.online:
                why = ONLINE_HOLDS_THE_GPU
            else:
                why = (
                    f"the owners' use came back: {allowed} milli may be lent, {lent} are, "
                    f"for {now_s - since:.0f} s (grace {self.grace_s:.0f} s)"
                )
            for pod in sorted(gpu.lent, key=lambda p: (-p.bound_s, p.uid)):
                if lent <= allowed:
                    break
                result.append(Reclaim(key, pod, why))
                lent -= pod.milli
            del self.over_lent_since[key]
        for key in [k for k in self.over_lent_since if k not in gpus]:
            del self.over_lent_since[key]
        return result
