"""How much of what tenants hold they really use, and what follows from it.

overRequest = requested / p95(used). In Alibaba's PAI trace 98% of tasks used less GPU than they
requested (shared/reference/benchmarks-and-traces.md §2); the index makes that visible per tenant
and workload, sets the expected load of a tenant's new pods, sizes the capacity that can be lent
to opportunistic pods (Koordinator's reclaim shape: allocated - peak * (1 + margin), reference
scheduler-anchors.md §1) and gives right-sizing advice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from scheduling.core.types import MILLI_PER_GPU

MIN_USED_GPUS = 0.01  # below a hundredth of a GPU busy, a tenant is idle: no ratio to show
MIN_USAGE_RATIO = 0.05
SHARE_STEP_MILLI = 50


def over_request(requested_gpus: float, used_p95_gpus: float | None) -> float | None:
    """requested / p95(used); None (shown "—") without measurements, without requests or when
    nothing was busy (a ratio over 0 is not a number a reader can act on)."""
    if used_p95_gpus is None or used_p95_gpus < MIN_USED_GPUS or requested_gpus <= 0:
        return None
    return requested_gpus / used_p95_gpus


def usage_ratio(requested_gpus: float, used_p95_gpus: float | None) -> float:
    """The share of a request a tenant's pods are expected to use: p95(used) / requested, kept in
    [MIN_USAGE_RATIO, 1]; 1 (assume the worst) when nothing is known."""
    if used_p95_gpus is None or requested_gpus <= 0:
        return 1.0
    return min(1.0, max(MIN_USAGE_RATIO, used_p95_gpus / requested_gpus))


def reclaimable_milli(allocated_milli: int, used_p95_milli: float, margin: float) -> int:
    """Idle-but-allocated capacity of one GPU that may be lent: max(0, allocated - p95 * (1+m))."""
    return max(0, int(allocated_milli - used_p95_milli * (1.0 + margin)))


@dataclass(frozen=True, slots=True)
class Advice:
    requested_gpus: float  # per pod, as requested (a share counts as its fraction)
    used_p95_gpus: float  # per pod
    recommended_gpus: int  # whole GPUs to request (0 when a share is enough)
    recommended_milli: int  # GPU share to request instead (0 when whole GPUs are advised)
    saving_gpus: float  # per pod

    @property
    def resource(self) -> str:
        if self.recommended_milli:
            return f"gpusched.io/gpu-milli: {self.recommended_milli}"
        return f"nvidia.com/gpu: {self.recommended_gpus}"


def right_size(requested_gpus: float, used_p95_gpus: float, margin: float = 0.2) -> Advice:
    """What a pod should request given its p95 use plus a safety margin: whole GPUs when it needs
    one or more, otherwise a share rounded up to 50 milli."""
    need = used_p95_gpus * (1.0 + margin)
    if need >= 1.0:
        gpus = math.ceil(need - 1e-9)
        recommended, milli = float(gpus), 0
    else:
        milli = max(
            SHARE_STEP_MILLI, math.ceil(need * MILLI_PER_GPU / SHARE_STEP_MILLI) * SHARE_STEP_MILLI
        )
        gpus, recommended = 0, milli / MILLI_PER_GPU
    return Advice(
        requested_gpus=requested_gpus,
        used_p95_gpus=used_p95_gpus,
        recommended_gpus=gpus,
        recommended_milli=milli,
        saving_gpus=max(0.0, requested_gpus - recommended),
    )
