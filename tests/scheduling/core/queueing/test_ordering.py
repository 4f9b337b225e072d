"""How one ClusterQueue orders its pending workloads: by default priority, tenant usage, FIFO;
with UsageBasedAdmissionFairSharing the LocalQueue with the lowest decayed usage first."""

from __future__ import annotations

from dataclasses import replace

from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.config import (
    AdmissionFairSharing,
    AdmissionMode,
    LocalQueue,
    QueueingStrategy,
)
from scheduling.core.queueing.fair_usage import FairUsageState
from scheduling.core.queueing.ordering import positions, queue_orders
from scheduling.core.queueing.quota import QuotaBook
from tests.scheduling.core.queueing.builders import FLAVORS, cq, wl

FAIR = AdmissionMode.USAGE_BASED
# A half-life equal to the sampling interval: each admission costs half its request at once.
HALF = AdmissionFairSharing(usage_half_life_s=300, usage_sampling_interval_s=300)


def state(**consumed_gpus: float) -> FairUsageState:
    return FairUsageState(
        HALF, {f"{t}/q": {"nvidia.com/gpu": gpus} for t, gpus in consumed_gpus.items()}
    )


def lqs(*tenants: str, weights: dict[str, float] | None = None) -> dict[str, LocalQueue]:
    return {f"{t}/q": LocalQueue(t, "q", "shared", (weights or {}).get(t, 1.0)) for t in tenants}


def test_admission_fair_sharing_orders_two_local_queues_by_decayed_usage() -> None:
    queues = [cq("shared", 8, admission_mode=FAIR)]
    pending = [
        wl("a-old", "shared", 1, created=0, local_queue="a/q"),
        wl("b-new", "shared", 1, created=5, local_queue="b/q"),
    ]
    # a used more lately: b goes first although a's workload is older.
    orders = queue_orders(QuotaBook(queues), pending, [], lqs("a", "b"), state(a=10, b=2))
    assert [w.key for w in orders["shared"].full_order()] == ["b-new", "a-old"]
    # Without admission fair sharing the same queue is FIFO.
    plain = queue_orders(QuotaBook([cq("shared", 8)]), pending, [], lqs("a", "b"), state(a=10))
    assert [w.key for w in plain["shared"].full_order()] == ["a-old", "b-new"]


def test_usage_comes_before_priority_as_in_kueue() -> None:
    queues = [cq("shared", 8, admission_mode=FAIR)]
    pending = [
        wl("a-urgent", "shared", 1, priority=100, local_queue="a/q"),
        wl("b-normal", "shared", 1, local_queue="b/q"),
    ]
    orders = queue_orders(QuotaBook(queues), pending, [], lqs("a", "b"), state(a=10, b=2))
    assert [w.key for w in orders["shared"].full_order()] == ["b-normal", "a-urgent"]


def test_the_local_queue_weight_divides_its_usage() -> None:
    queues = [cq("shared", 8, admission_mode=FAIR)]
    pending = [wl("a1", "shared", 1, local_queue="a/q"), wl("b1", "shared", 1, local_queue="b/q")]
    weights = {"a": 4.0}  # a's 10 counts as 2.5 < b's 3
    orders = queue_orders(
        QuotaBook(queues), pending, [], lqs("a", "b", weights=weights), state(a=10, b=3)
    )
    assert [w.key for w in orders["shared"].full_order()] == ["a1", "b1"]


def test_entry_penalties_reorder_within_one_cycle() -> None:
    # b is below a by 0.5 GPU; each 1-GPU admission costs its queue 0.5 at once, so after b's
    # first workload the two are even and FIFO lets a's go next.
    queues = [cq("shared", 3, admission_mode=FAIR)]
    pending = [
        wl("a1", "shared", 1, created=0, local_queue="a/q"),
        wl("b1", "shared", 1, created=1, local_queue="b/q"),
        wl("b2", "shared", 1, created=2, local_queue="b/q"),
    ]
    fair = state(a=1.5, b=1.0)
    orders = queue_orders(QuotaBook(queues), pending, [], lqs("a", "b"), fair)
    assert positions(orders) == {"b1": 1, "a1": 2, "b2": 3}
    result = admission_cycle(
        queues, FLAVORS, pending, [], local_queues=list(lqs("a", "b").values()), fair_usage=fair
    )
    assert [a.workload.key for a in result.admitted] == ["b1", "a1", "b2"]


def test_a_strict_fifo_fair_queue_blocks_behind_its_least_used_head() -> None:
    strict = QueueingStrategy.STRICT_FIFO
    queues = [replace(cq("shared", 1, admission_mode=FAIR), queueing_strategy=strict)]
    pending = [
        wl("a-small", "shared", 1, local_queue="a/q"),
        wl("b-big", "shared", 2, local_queue="b/q"),
    ]
    result = admission_cycle(
        queues,
        FLAVORS,
        pending,
        [],
        local_queues=list(lqs("a", "b").values()),
        fair_usage=state(a=5, b=0),
    )
    assert not result.admitted
    assert result.waiting["b-big"].position == 1
    assert "waiting behind b-big" in result.waiting["a-small"].message
