"""How busy a simulated pod keeps its GPUs over time, as a share of what it asked for.

Real tenants ask for far more than they use: in Alibaba's PAI trace 98% of tasks used less GPU than
requested (shared/reference/benchmarks-and-traces.md §2). A profile says how much of its request a
pod really uses, and how that moves: flat, a daily wave, or bursts.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from typing import Any

KINDS = ("constant", "diurnal", "bursty")
DAY_S = 86_400.0
# Each field as the specs (sim/specs/*.yaml) and the simulated kubelet's annotation
# `sim.gpusched.io/utilization` spell it; as_json() keeps the field names (a Pod row's simulation).
SPEC_KEYS = {
    "kind": "kind",
    "mean": "mean",
    "jitter": "jitter",
    "periodSeconds": "period_s",
    "duty": "duty",
    "memory": "memory",
    "seed": "seed",
}


class ProfileError(ValueError):
    """A utilization profile that cannot be used; the message names the key."""


@dataclass(frozen=True, slots=True)
class UtilizationProfile:
    kind: str = "constant"
    mean: float = 0.5  # average share of the request in use, 0..1
    jitter: float = 0.05  # +- noise around the curve
    period_s: float = DAY_S  # diurnal: length of one wave; bursty: length of one on/off cycle
    duty: float = 0.3  # bursty: share of each cycle spent busy
    memory: float = 0.6  # share of the GPUs' framebuffer the pod fills
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ProfileError(f"utilization.kind {self.kind!r} is not one of {', '.join(KINDS)}")
        for name in ("mean", "jitter", "duty", "memory"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ProfileError(f"utilization.{name} must be between 0 and 1, got {value}")
        if self.period_s <= 0:
            raise ProfileError("utilization.periodSeconds must be positive")

    def at(self, elapsed_s: float) -> float:
        """Share of the request in use `elapsed_s` seconds after the pod started, 0..1."""
        if self.kind == "diurnal":
            base = self.mean * (1.0 + 0.8 * math.sin(2 * math.pi * elapsed_s / self.period_s))
        elif self.kind == "bursty":
            busy = (elapsed_s % self.period_s) < self.duty * self.period_s
            base = min(1.0, self.mean / self.duty) if busy else 0.02
        else:
            base = self.mean
        # Deterministic noise: the same pod at the same second always reads the same.
        noise = random.Random(hash((self.seed, int(elapsed_s) // 15))).uniform(-1, 1) * self.jitter
        return min(1.0, max(0.0, base + noise))

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def as_spec(self) -> dict[str, Any]:
        """In the specs' spelling (SPEC_KEYS), as the simulated kubelet reads it."""
        return {key: getattr(self, field) for key, field in SPEC_KEYS.items()}

    @classmethod
    def from_json(cls, doc: dict[str, Any] | None) -> UtilizationProfile:
        return cls(**(doc or {}))
