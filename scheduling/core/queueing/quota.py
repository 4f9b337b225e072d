"""The quota book: what every cluster queue uses per (flavor, resource), and whether more fits.

Kueue's rules, for a cluster queue C and one (flavor, resource) with nominal N, borrowingLimit B
and lendingLimit L (canonical units, resources.py):
- without a cohort, C's usage never exceeds N;
- in a cohort, C keeps `guaranteed = N - L` for itself (0 without a lending limit) and lends the
  rest, `lendable = L` (N without a limit), to the cohort's pool; the cohort's members together
  may use no more beyond their guaranteed parts than the pool holds:
  `sum_m max(0, usage_m - guaranteed_m) <= sum_m lendable_m`;
- C's usage never exceeds `N + B` (no limit without B); C *borrows* what it uses above N.

Fair sharing is Kueue's dominant resource share (scheduler-anchors.md §3): for each resource r,
`borrowed_r = sum over C's flavors of max(0, usage + request - nominal)`, the share is
`max_r borrowed_r * 1000 / lendable_r(cohort)` in integer arithmetic, then divided by the
queue's weight (`share * 1000 / weight_milli`); weight 0 gives the largest share possible, and a
queue outside any cohort has share 0.

Idle-held capacity counts against the holder: with `idle_weight` w > 0, what a queue's admitted
workloads hold but do not use (telemetry, scheduling.efficiency) is added w times to its usage in
the share, so of two queues borrowing the same, the one sitting on idle GPUs ranks behind. Only
the share changes; quota limits still count requests.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping

from scheduling.core.queueing.config import ClusterQueue, ResourceQuota
from scheduling.core.queueing.resources import format_quantity

FlavorResource = tuple[str, str]  # (flavor, resource)
Usage = Mapping[FlavorResource, int]
MAX_SHARE = sys.maxsize


class QuotaBook:
    def __init__(
        self,
        cluster_queues: Iterable[ClusterQueue],
        usage: Mapping[str, Usage] | None = None,
        *,
        idle_weight: float = 0.0,
    ) -> None:
        self.queues: dict[str, ClusterQueue] = {cq.name: cq for cq in cluster_queues}
        self.usage: dict[str, dict[FlavorResource, int]] = {name: {} for name in self.queues}
        self.idle_weight = idle_weight
        self.idle: dict[str, dict[FlavorResource, int]] = {name: {} for name in self.queues}
        self.cohorts: dict[str, list[str]] = defaultdict(list)
        for cq in self.queues.values():
            if cq.cohort:
                self.cohorts[cq.cohort].append(cq.name)
        self._quota: dict[str, dict[FlavorResource, ResourceQuota]] = {
            cq.name: {(f, r): q for f, r, q in cq.flavor_resources()} for cq in self.queues.values()
        }
        # Per cohort and (flavor, resource): the pool everyone lends to, and how much of it is in
        # use (the members' usage beyond their guaranteed parts), kept current by charge().
        self._pool: dict[str, dict[FlavorResource, int]] = defaultdict(lambda: defaultdict(int))
        self._beyond: dict[str, dict[FlavorResource, int]] = defaultdict(lambda: defaultdict(int))
        # Per cohort and resource: the lendable total over every flavor (DRS's denominator).
        self._lendable: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for cq in self.queues.values():
            if cq.cohort:
                for (flavor, resource), quota in self._quota[cq.name].items():
                    self._pool[cq.cohort][(flavor, resource)] += quota.lendable
                    self._lendable[cq.cohort][resource] += quota.lendable
        for name, amounts in (usage or {}).items():
            self.charge(name, amounts)

    # --- reading ---------------------------------------------------------------------------------

    def quota(self, cq: str, fr: FlavorResource) -> ResourceQuota | None:
        return self._quota[cq].get(fr)

    def used(self, cq: str, fr: FlavorResource) -> int:
        return self.usage[cq].get(fr, 0)

    def members(self, cq: str) -> list[str]:
        """The cluster queues sharing quota with `cq` (itself included)."""
        cohort = self.queues[cq].cohort
        return list(self.cohorts[cohort]) if cohort else [cq]

    def borrowed(self, cq: str, fr: FlavorResource) -> int:
        quota = self.quota(cq, fr)
        nominal = quota.nominal if quota else 0
        return max(0, self.used(cq, fr) - nominal)

    def is_borrowing(self, cq: str, frs: Iterable[FlavorResource] | None = None) -> bool:
        keys = self.usage[cq] if frs is None else frs
        return any(self.borrowed(cq, fr) > 0 for fr in keys)

    def available(self, cq: str, fr: FlavorResource) -> int:
        """How much more `cq` could take of `fr` right now, borrowing included."""
        quota = self.quota(cq, fr)
        if quota is None:
            return 0
        used = self.used(cq, fr)
        cohort = self.queues[cq].cohort
        if not cohort:
            return max(0, quota.nominal - used)
        own_limit = (
            quota.nominal + quota.borrowing_limit - used
            if quota.borrowing_limit is not None
            else MAX_SHARE
        )
        pool_room = (
            max(0, quota.guaranteed - used) + self._pool[cohort][fr] - self._beyond[cohort][fr]
        )
        return max(0, min(own_limit, pool_room))

    def max_capacity(self, cq: str, fr: FlavorResource) -> int:
        """The most `cq` could ever hold of `fr`: its limits with the whole cohort idle."""
        quota = self.quota(cq, fr)
        if quota is None:
            return 0
        cohort = self.queues[cq].cohort
        if not cohort:
            return quota.nominal
        total = quota.guaranteed + self._pool[cohort][fr]
        if quota.borrowing_limit is not None:
            total = min(total, quota.nominal + quota.borrowing_limit)
        return total

    def fits(self, cq: str, add: Usage, *, allow_borrowing: bool = True) -> str | None:
        """None when `add` fits in `cq` now, else why not (Kueue-style message)."""
        cohort = self.queues[cq].cohort
        for fr, amount in sorted(add.items()):
            if amount <= 0:
                continue
            flavor, resource = fr
            quota = self.quota(cq, fr)
            if quota is None:
                return f"flavor {flavor} has no quota for {resource}"
            used = self.used(cq, fr)
            after = used + amount
            if (not cohort or not allow_borrowing) and after > quota.nominal:
                return self._insufficient(cq, fr, amount, borrowing=bool(cohort))
            if cohort:
                if quota.borrowing_limit is not None and after > (
                    quota.nominal + quota.borrowing_limit
                ):
                    return self._insufficient(cq, fr, amount, borrowing=True)
                beyond = (
                    self._beyond[cohort][fr]
                    - max(0, used - quota.guaranteed)
                    + max(0, after - quota.guaranteed)
                )
                if beyond > self._pool[cohort][fr]:
                    return self._insufficient(cq, fr, amount, borrowing=True)
        return None

    def _insufficient(self, cq: str, fr: FlavorResource, amount: int, *, borrowing: bool) -> str:
        flavor, resource = fr
        if amount > self.max_capacity(cq, fr):
            return (
                f"insufficient quota for {resource} in flavor {flavor}: request "
                f"{format_quantity(resource, amount)} > maximum capacity "
                f"{format_quantity(resource, self.max_capacity(cq, fr))}"
            )
        free = self.available(cq, fr) if borrowing else max(0, self._nominal_room(cq, fr))
        return (
            f"insufficient unused quota for {resource} in flavor {flavor}: "
            f"{format_quantity(resource, amount - free)} more needed"
        )

    def _nominal_room(self, cq: str, fr: FlavorResource) -> int:
        quota = self.quota(cq, fr)
        return (quota.nominal if quota else 0) - self.used(cq, fr)

    def dominant_resource_share(self, cq: str, add: Usage | None = None) -> tuple[int, str]:
        """Kueue's weighted DRS of `cq`, with `add` counted as if admitted (module doc)."""
        queue = self.queues[cq]
        if not queue.cohort:
            return 0, ""
        weight_milli = round(queue.weight * 1000)
        if weight_milli <= 0:
            return MAX_SHARE, ""
        borrowed: dict[str, int] = defaultdict(int)
        idle = self.idle[cq]
        for fr, quota in self._quota[cq].items():
            extra = add.get(fr, 0) if add else 0
            held_idle = round(self.idle_weight * idle.get(fr, 0))
            over = self.used(cq, fr) + extra + held_idle - quota.nominal
            if over > 0:
                borrowed[fr[1]] += over
        share, dominant = -1, ""
        for resource, amount in sorted(borrowed.items()):
            lendable = self._lendable[queue.cohort][resource]
            if lendable > 0:
                ratio = amount * 1000 // lendable
                if ratio > share:
                    share, dominant = ratio, resource
        if share < 0:
            return 0, ""
        return share * 1000 // weight_milli, dominant

    # --- writing ---------------------------------------------------------------------------------

    def charge_idle(self, cq: str, amounts: Usage, sign: int = 1) -> None:
        """Add (sign 1) or remove (sign -1) what a workload holds idle (the share's extra term)."""
        idle = self.idle[cq]
        for fr, amount in amounts.items():
            idle[fr] = max(0, idle.get(fr, 0) + sign * amount)

    def charge(self, cq: str, amounts: Usage, sign: int = 1) -> None:
        """Add (sign 1) or remove (sign -1) a workload's usage."""
        cohort = self.queues[cq].cohort
        usage = self.usage[cq]
        for fr, amount in amounts.items():
            if not amount:
                continue
            before = usage.get(fr, 0)
            after = before + sign * amount
            if after < 0:
                raise ValueError(f"{cq}: usage of {fr} would go negative")
            usage[fr] = after
            if cohort:
                quota = self._quota[cq].get(fr)
                guaranteed = quota.guaranteed if quota else 0
                self._beyond[cohort][fr] += max(0, after - guaranteed) - max(0, before - guaranteed)
