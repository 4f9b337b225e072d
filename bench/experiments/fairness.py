"""Fairness measures of the fair-share experiment: weighted max-min fair shares, Jain's index,
percentiles, and the meter that integrates allocation and fair-share ratios over time."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


def water_fill(
    capacity: float, demand: dict[str, float], weight: dict[str, float]
) -> dict[str, float]:
    """Weighted max-min fair shares of `capacity` given each tenant's demand."""
    fair = dict.fromkeys(demand, 0.0)
    active = {t for t, d in demand.items() if d > 0}
    remaining = capacity
    while active and remaining > 1e-9:
        weights = {t: max(weight.get(t, 0.0), 0.0) for t in active}
        total = sum(weights.values())
        if total <= 0:
            weights, total = dict.fromkeys(active, 1.0), float(len(active))
        offer = {t: remaining * weights[t] / total for t in active}
        saturated = {t for t in active if demand[t] - fair[t] <= offer[t]}
        if not saturated:
            for t in active:
                fair[t] += offer[t]
            break
        for t in saturated:
            remaining -= demand[t] - fair[t]
            fair[t] = demand[t]
        active -= saturated
    return fair


def jain(values: Sequence[float]) -> float:
    values = [v for v in values if v >= 0]
    if not values or not any(values):
        return 0.0
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = (len(ordered) - 1) * q
    low, high = math.floor(k), math.ceil(k)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)


@dataclass
class FairnessMeter:
    """fairshare's time integrals: allocation, utilization, and each tenant's allocation over its
    weighted max-min fair share while the cluster is contended."""

    shares: dict[str, float]
    usage: dict[str, float]  # tenant -> the utilization of its jobs
    capacity: int
    window_end_s: float
    last_s: float = 0.0
    allocated: float = 0.0
    used: float = 0.0
    measured_s: float = 0.0
    ratio_integral: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    ratio_time: dict[str, float] = field(default_factory=lambda: defaultdict(float))

    def advance(
        self, until_s: float, running: Mapping[str, int], waiting: Mapping[str, int]
    ) -> None:
        """`running` and `waiting` GPUs per tenant held from the last call until `until_s`."""
        span = min(until_s, self.window_end_s) - max(self.last_s, 0.0)
        if span > 0:
            self.allocated += span * sum(running.values())
            self.used += span * sum(n * self.usage.get(t, 0.0) for t, n in running.items())
            self.measured_s += span
            demand = {t: float(running.get(t, 0) + waiting.get(t, 0)) for t in self.shares}
            if sum(demand.values()) > self.capacity:
                fair = water_fill(float(self.capacity), demand, self.shares)
                for tenant in self.shares:
                    if fair[tenant] >= 0.5:
                        self.ratio_integral[tenant] += span * running.get(tenant, 0) / fair[tenant]
                        self.ratio_time[tenant] += span
        self.last_s = until_s

    def ratio(self, tenant: str) -> float:
        time_s = self.ratio_time[tenant]
        return self.ratio_integral[tenant] / time_s if time_s else 1.0

    def tenants(self, waits: Mapping[str, Sequence[float]]) -> dict[str, dict[str, float]]:
        """Per tenant: its jobs' waits and its fair-share ratio, as the experiment reports them."""
        return {
            tenant: {
                "jobs": len(w),
                "share": round(self.shares[tenant], 4),
                "wait_p50_s": round(percentile(w, 0.5), 1),
                "wait_p95_s": round(percentile(w, 0.95), 1),
                "wait_mean_s": round(statistics.fmean(w), 1),
                "fair_share_ratio": round(self.ratio(tenant), 4),
            }
            for tenant, w in sorted(waits.items())
        }

    def share(self, integral: float) -> float:
        return integral / (self.capacity * self.measured_s) if self.measured_s else 0.0
