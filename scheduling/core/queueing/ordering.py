"""How one ClusterQueue orders its pending workloads, head first.

- By default: higher priority first; then, among the queue's LocalQueues (tenants), the one using
  the least of the queue's nominal quota for its weight (gpusched's usage-aware ordering); then FIFO
  by creation time.
- With `admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}` (fair_usage.py): the
  LocalQueue with the lowest decayed usage first, then priority, then FIFO, as Kueue orders such a
  queue (pkg/cache/queue/cluster_queue.go, queueOrderingFunc: usage before the base ordering). Each
  admission adds the workload's entry penalty to its LocalQueue at once, so the order moves as
  workloads are admitted within one cycle.

`QueueOrder.full_order()` is the order the queue would serve if every head were admitted in turn:
the positions the API and the dashboard show.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from scheduling.core.queueing.config import AdmissionMode, ClusterQueue, LocalQueue
from scheduling.core.queueing.fair_usage import (
    FairUsageState,
    amounts_in_base_units,
    entry_penalty,
    weighted_usage,
)
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import QuotaBook

if TYPE_CHECKING:
    from scheduling.core.queueing.admission import QueuedWorkload


def _fifo(w: QueuedWorkload) -> tuple[int, float, str]:
    return (-w.priority, w.created_at, w.key)


class QueueOrder:
    """Pending workloads in lanes (one per LocalQueue under fair usage, else a single lane), each
    lane sorted; the head is the best lane head."""

    def __init__(
        self,
        lanes: Mapping[str, list[QueuedWorkload]],
        usage: dict[str, float] | None = None,
        penalty: Callable[[QueuedWorkload], float] | None = None,
    ) -> None:
        self._lanes = {name: deque(items) for name, items in lanes.items() if items}
        self._usage = usage  # per lane, lower first; None: a single static lane
        self._penalty = penalty

    def head(self) -> QueuedWorkload | None:
        lane = self._head_lane()
        return self._lanes[lane][0] if lane is not None else None

    def _head_lane(self) -> str | None:
        if not self._lanes:
            return None
        usage = self._usage or {}
        return min(self._lanes, key=lambda n: (usage.get(n, 0.0), *_fifo(self._lanes[n][0])))

    def pop(self, *, admitted: bool) -> None:
        """Done with the head: admitted (its LocalQueue pays the entry penalty) or set aside."""
        lane = self._head_lane()
        if lane is None:
            return
        workload = self._lanes[lane].popleft()
        if not self._lanes[lane]:
            del self._lanes[lane]
        if admitted and self._usage is not None and self._penalty is not None:
            self._usage[lane] = self._usage.get(lane, 0.0) + self._penalty(workload)

    def full_order(self) -> list[QueuedWorkload]:
        copy = QueueOrder(
            {n: list(items) for n, items in self._lanes.items()},
            dict(self._usage) if self._usage is not None else None,
            self._penalty,
        )
        out: list[QueuedWorkload] = []
        while (head := copy.head()) is not None:
            out.append(head)
            copy.pop(admitted=True)
        return out

    def lane_usage(self) -> dict[str, float]:
        return dict(self._usage or {})


def local_queue_shares(
    book: QuotaBook,
    admitted: Sequence[AdmittedWorkload],
    weights: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Per local queue: the largest fraction of its cluster queue's nominal quota (any resource,
    all flavors) that its admitted workloads use, divided by its weight."""
    nominal: dict[tuple[str, str], int] = defaultdict(int)
    for name, queue in book.queues.items():
        for _, resource, quota in queue.flavor_resources():
            nominal[(name, resource)] += quota.nominal
    used: dict[tuple[str, str, str], int] = defaultdict(int)
    for a in admitted:
        for (_, resource), amount in a.usage.items():
            used[(a.local_queue, a.cluster_queue, resource)] += amount
    shares: dict[str, float] = defaultdict(float)
    for (lq, cq_name, resource), amount in used.items():
        total = nominal.get((cq_name, resource), 0)
        if total > 0:
            shares[lq] = max(shares[lq], amount / total)
    out: dict[str, float] = {}
    for lq, share in shares.items():
        weight = (weights or {}).get(lq, 1.0)
        out[lq] = share / weight if weight > 0 else float("inf")
    return out


def queue_orders(
    book: QuotaBook,
    pending: Sequence[QueuedWorkload],
    admitted: Sequence[AdmittedWorkload],
    local_queues: Mapping[str, LocalQueue],
    fair_usage: FairUsageState | None = None,
) -> dict[str, QueueOrder]:
    """Per cluster queue of `book`: its pending workloads (those of `pending` in it) in order."""
    weights = {key: lq.weight for key, lq in local_queues.items()}
    shares = local_queue_shares(book, admitted, weights)
    by_queue: dict[str, list[QueuedWorkload]] = defaultdict(list)
    for w in pending:
        by_queue[w.cluster_queue].append(w)
    state = fair_usage or FairUsageState()
    out: dict[str, QueueOrder] = {}
    for name, items in by_queue.items():
        cq = book.queues[name]
        if cq.admission_mode is AdmissionMode.USAGE_BASED:
            out[name] = _fair_usage_order(cq, items, weights, state)
        else:
            ordered = sorted(
                items,
                key=lambda w: (-w.priority, shares.get(w.local_queue, 0.0), w.created_at, w.key),
            )
            out[name] = QueueOrder({"": ordered})
    return out


def _fair_usage_order(
    cq: ClusterQueue,
    items: Sequence[QueuedWorkload],
    weights: Mapping[str, float],
    state: FairUsageState,
) -> QueueOrder:
    lanes: dict[str, list[QueuedWorkload]] = defaultdict(list)
    for w in sorted(items, key=_fifo):
        lanes[w.local_queue].append(w)
    usage = {
        lq: weighted_usage(state.consumed.get(lq, {}), weights.get(lq, 1.0), state.settings)
        for lq in lanes
    }

    def penalty(w: QueuedWorkload) -> float:
        request = {r: a for r, a in w.demand.amounts(cq.covered).items() if r in cq.covered}
        cost = entry_penalty(amounts_in_base_units(request), state.settings)
        return weighted_usage(cost, weights.get(w.local_queue, 1.0), state.settings)

    return QueueOrder(lanes, usage, penalty)


def positions(orders: Mapping[str, QueueOrder]) -> dict[str, int]:
    """Each pending workload's 1-based place in its cluster queue."""
    return {
        w.key: k for order in orders.values() for k, w in enumerate(order.full_order(), start=1)
    }
