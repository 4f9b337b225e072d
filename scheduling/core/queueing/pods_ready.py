"""Kueue's waitForPodsReady: an admitted workload whose pods are not all placed within a timeout
gives its quota back and is requeued after an exponential backoff (requeuingStrategy), so quota no
pod can use now is never held for long."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class WaitForPodsReady:
    timeout_s: float = 300.0  # Kueue's default (5 minutes); 0: never evict
    backoff_base_s: float = 60.0  # Kueue's backoffBaseSeconds
    backoff_max_s: float = 3600.0  # Kueue's backoffMaxSeconds

    def timed_out(self, admitted_at: float, now: float) -> bool:
        """An admitted workload with unplaced pods, admitted at `admitted_at`, must go."""
        return self.timeout_s > 0 and now - admitted_at >= self.timeout_s

    def requeue_delay(self, count: int) -> float:
        """Seconds before the `count`-th requeue after a timeout (1 = the first):
        base * 2^(count - 1), at most the maximum."""
        exponent = max(0, count - 1)
        if exponent >= 64:
            return self.backoff_max_s
        return min(self.backoff_max_s, self.backoff_base_s * 2.0**exponent)
