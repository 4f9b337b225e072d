"""Reservations and backfill: a gang at the head of the queue is not starved by small pods taking
each GPU as it frees (issue 18), small pods that finish in time still use the reserved GPUs, and a
reservation that cannot complete within its horizon is released and reported."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.backfill import (
    DEFAULT_STARVING_AFTER_S,
    BackfillPolicy,
    FairOrder,
    Reservation,
    ReservationBook,
    plan,
)
from scheduling.core.queueing.batch import schedule_batch
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import GangRef, PodRequest, ServiceClass
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework


def one_node() -> ClusterSnapshot:
    return ClusterSnapshot([make_node("n0").topology("dgx-h100").build()])


def gang(name: str, pods: int, gpus: int) -> list[PodRequest]:
    ref = GangRef(name, pods)
    return [replace(make_pod(f"{name}-{k}").gpus(gpus).build(), gang=ref) for k in range(pods)]


def single(name: str) -> PodRequest:
    return make_pod(name).gpus(1).build()


class World:
    """One node; pods end at known times; each cycle offers the same queue in the same order."""

    def __init__(
        self,
        fw: Framework,
        runtime: dict[str, float],
        horizon_s: float = 3600.0,
        fair_order: FairOrder | None = None,
        starving_after_s: float = DEFAULT_STARVING_AFTER_S,
    ):
        self.fw, self.snapshot = fw, one_node()
        self.fair_order = fair_order
        self.runtime = runtime  # predicted = true run time, by pod uid
        self.ends: dict[str, float] = {}
        self.running: dict[str, Decision] = {}
        self.book = ReservationBook()
        self.horizon_s = horizon_s
        self.starving_after_s = starving_after_s
        self.released: list[str] = []

    def start(self, decisions: list[Decision], now: float) -> None:
        for decision in decisions:
            self.running[decision.pod.uid] = decision
            self.ends[decision.pod.uid] = now + self.runtime.get(decision.pod.uid, 1e9)

    def cycle(self, queue: list[PodRequest], now: float, *, reserve: bool = True) -> list[str]:
        for uid, end in list(self.ends.items()):
            if end <= now and uid in self.running:
                self.fw.forget(self.running.pop(uid), self.snapshot)
        policy = BackfillPolicy(
            now=now,
            ends_at=lambda held: self.ends.get(held.pod.uid),
            runtime_s=lambda pod: self.runtime.get(pod.uid),
            book=self.book,
            horizon_s=self.horizon_s,
            fair_order=self.fair_order,
            starving_after_s=self.starving_after_s,
        )
        pending = [p for p in queue if p.uid not in self.ends]
        outcome = schedule_batch(
            self.fw, self.snapshot, pending, backfill=policy if reserve else None
        )
        self.released += [r.reason for r in outcome.released]
        started = list(outcome.placed) + [d for g in outcome.gangs for d in g]
        self.start(started, now)
        return [d.pod.uid for d in started]


def busy_node(world: World) -> None:
    """Eight 1-GPU pods running, ending one per 10 s."""
    first = [single(f"old-{k}") for k in range(8)]
    for k, pod in enumerate(first):
        world.runtime[pod.uid] = 10.0 * (k + 1)
    world.start(schedule_batch(world.fw, world.snapshot, first).placed, 0.0)


def test_without_reservation_the_gang_starves() -> None:
    """The issue's case as it was: each freed GPU goes to a single pod, every cycle."""
    fw = framework()
    world = World(fw, {})
    busy_node(world)
    queue = gang("train", 2, 2) + [single(f"small-{k}") for k in range(20)]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    started = [uid for t in range(10, 70, 10) for uid in world.cycle(queue, t, reserve=False)]
    assert not any(uid.startswith("train") for uid in started)


def test_the_head_gang_starts_within_bounded_cycles_on_one_8_gpu_node() -> None:
    """One 8-GPU node, a 2-pod x 2-GPU gang at the head, 1-GPU pods behind it: the node is held
    for the gang and it starts as soon as four GPUs are free (the fourth end, cycle 4)."""
    fw = framework()
    world = World(fw, {})
    busy_node(world)
    queue = gang("train", 2, 2) + [single(f"small-{k}") for k in range(20)]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    started_at: dict[str, float] = {}
    for t in range(10, 70, 10):
        for uid in world.cycle(queue, float(t)):
            started_at[uid] = t
    assert started_at["train-0"] == started_at["train-1"] == 40
    assert not world.released


def test_pods_that_finish_before_the_gang_needs_the_gpus_backfill() -> None:
    fw = framework()
    world = World(fw, {})
    busy_node(world)
    quick = single("quick")
    queue = [*gang("train", 2, 2), quick, single("slow")]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    world.runtime["quick"] = 15.0  # starts at 10, done at 25: before the gang's 40
    started = world.cycle(queue, 10.0)
    assert started == ["quick"]
    assert world.book.active["train"].complete_at == 40.0


def gang_ahead_of_singles() -> tuple[World, list[PodRequest], list[PodRequest]]:
    """The busy node, a 2 x 2-GPU gang and twenty 1-GPU pods, all running long once started."""
    world = World(framework(), {})
    busy_node(world)
    train = gang("train", 2, 2)
    smalls = [single(f"small-{k}") for k in range(20)]
    world.runtime.update({p.uid: 1000.0 for p in train + smalls})
    return world, train, smalls


def test_a_reservation_holds_through_the_cycles_its_owner_sits_out() -> None:
    """The scheduler runs a cycle every second or so, and an owner backing off after a failed
    attempt is not in most of them: its nodes stay held, and it starts as soon as its GPUs are
    free, as when it is in every cycle."""
    world, train, smalls = gang_ahead_of_singles()
    started_at: dict[str, float] = {}
    for t in range(10, 70, 5):
        queue = train + smalls if t % 10 == 0 else smalls  # backing off every other cycle
        for uid in world.cycle(queue, float(t)):
            started_at[uid] = t
    assert started_at["train-0"] == started_at["train-1"] == 40
    assert not world.released
    assert "train" not in world.book.active and "train" not in world.book.since


def test_a_reservation_whose_owner_stays_away_is_given_up() -> None:
    """An owner not tried for longer than the grace (gone, or far behind the batch's end)
    holds nothing."""
    world, train, smalls = gang_ahead_of_singles()
    assert world.cycle(train + smalls, 10.0) == []  # one GPU free, held for the gang
    assert world.cycle(smalls, 30.0) == []  # absent for 20 s: still held
    assert world.cycle(smalls, 45.0) == ["small-0", "small-1", "small-2", "small-3"]
    assert not world.book.active and not world.book.since


def test_a_reservation_beyond_the_horizon_is_not_held() -> None:
    """Nothing ends within the horizon: the small pods are not held back."""
    fw = framework()
    world = World(fw, {}, horizon_s=5.0)
    busy_node(world)
    queue = [*gang("train", 2, 2), single("small")]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    assert world.cycle(queue, 10.0) == ["small"]
    assert not world.book.active


def test_a_reservation_held_past_its_horizon_is_released_and_reported() -> None:
    """The predicted ends slip (the pods run longer than predicted): after the horizon the
    reservation goes, with the reason."""
    fw = framework()
    world = World(fw, {}, horizon_s=30.0)
    busy_node(world)
    queue = [*gang("train", 2, 2), single("small")]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    running = list(world.ends)
    world.ends = dict.fromkeys(running, 20.0)  # predicted to end at 20
    world.cycle(queue, 5.0)
    assert "train" in world.book.active
    world.ends = dict.fromkeys(running, 40.0)  # predictions move, within the horizon
    world.cycle(queue, 30.0)
    assert "train" in world.book.active and not world.released
    world.ends = dict.fromkeys(running, 60.0)
    world.cycle(queue, 50.0)  # held since 5: 45 s > the 30 s horizon
    assert world.released and "without starting" in world.released[0]
    assert "train" not in world.book.active


@settings(max_examples=40, deadline=None)
@given(
    ends=st.lists(st.floats(min_value=0, max_value=1000), min_size=8, max_size=8),
    gpus=st.sampled_from([1, 2, 4, 8]),
    missing=st.integers(min_value=1, max_value=4),
)
def test_the_plan_completes_when_enough_gpus_are_predicted_free(
    ends: list[float], gpus: int, missing: int
) -> None:
    """Property: the planned moment is the first at which the node's predicted free GPUs hold
    the missing pods (None when they never can)."""
    fw = framework()
    snapshot = one_node()
    pods = [single(f"p{k}") for k in range(8)]
    schedule_batch(fw, snapshot, pods)
    end_of = {p.uid: e for p, e in zip(pods, ends, strict=True)}

    def ends_at(held: HeldPod) -> float | None:
        return end_of[held.pod.uid]

    found = plan(snapshot, gpus, missing, snapshot.cordoned == False, ends_at, 0.0)  # noqa: E712
    need = gpus * missing
    if need > 8:
        assert found is None
        return
    assert found is not None
    assert found[0] == sorted(ends)[need - 1]
    assert found[1] == ("n0",)


def by_namespace(shares: dict[str, float]) -> FairOrder:
    return FairOrder(lambda pod: pod.namespace, shares)


def in_queue(queue: str, pods: list[PodRequest]) -> list[PodRequest]:
    return [replace(p, namespace=queue) for p in pods]


def test_a_reservation_does_not_hold_nodes_against_queues_ahead_of_its_owner() -> None:
    """The gang's queue borrows (share 0.5): a pod of a queue within its share (0) takes the
    freed GPU on the reserved node, though it will not end before the gang needs it; a pod of
    a queue further behind (0.7) is held back as before."""
    world = World(framework(), {}, fair_order=by_namespace({"train": 0.5, "mine": 0.0, "far": 0.7}))
    busy_node(world)
    queue = [
        *in_queue("train", gang("train", 2, 2)),
        *in_queue("far", [single("behind")]),
        *in_queue("mine", [single("ahead")]),
    ]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    assert world.cycle(queue, 10.0) == ["ahead"]
    assert "train" in world.book.active


def starts_of_a_borrowing_gang(starving_after_s: float) -> dict[str, float]:
    """The busy node; a gang of a borrowing queue (share 0.5) and 1-GPU pods of a queue within
    its share (0), all running long, offered every 10 s: when each started."""
    world = World(
        framework(),
        {},
        fair_order=by_namespace({"train": 0.5, "mine": 0.0}),
        starving_after_s=starving_after_s,
    )
    busy_node(world)
    queue = [
        *in_queue("train", gang("train", 2, 2)),
        *in_queue("mine", [single(f"ahead-{k}") for k in range(20)]),
    ]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    started_at: dict[str, float] = {}
    for t in range(10, 90, 10):
        for uid in world.cycle(queue, float(t)):
            started_at[uid] = t
    assert not world.released
    return started_at


def test_a_gang_past_the_starvation_bound_holds_its_nodes_against_every_queue() -> None:
    """Within the bound, the queue ahead takes every GPU as it frees and the gang never starts;
    past it (the gang was created at 0, the bound is 5 s), its node is held against that queue
    too, and it starts at 40, when its four GPUs are free, as at the head of one queue."""
    assert "train-0" not in starts_of_a_borrowing_gang(DEFAULT_STARVING_AFTER_S)
    started_at = starts_of_a_borrowing_gang(5.0)
    assert started_at["train-0"] == started_at["train-1"] == 40
    assert not any(uid.startswith("ahead") for uid, t in started_at.items() if t < 40)


def test_a_starving_gang_keeps_its_reservation_past_the_horizon() -> None:
    """The predicted ends slip past the horizon: a starving owner's reservation is not released
    (only what ends before it completes may use its node)."""
    world = World(framework(), {}, horizon_s=30.0, starving_after_s=0.0)
    busy_node(world)
    queue = [*gang("train", 2, 2), single("small")]
    world.runtime.update({p.uid: 1000.0 for p in queue})
    running = list(world.ends)
    for now, end in ((5.0, 20.0), (30.0, 40.0), (50.0, 200.0)):
        world.ends = dict.fromkeys(running, end)
        assert world.cycle(queue, now) == []
        assert "train" in world.book.active
    assert not world.released


def reserved_on_full_nodes(
    nodes: int, batch: list[PodRequest], fair_order: FairOrder
) -> list[Reservation]:
    """The reservations `batch` makes on 8-GPU nodes full of 1-GPU pods ending every 10 s."""
    fw = framework()
    snapshot = ClusterSnapshot(
        [make_node(f"n{k}").topology("dgx-h100").build() for k in range(nodes)]
    )
    running = [single(f"old-{k}") for k in range(8 * nodes)]
    schedule_batch(fw, snapshot, running)
    ends = {p.uid: 10.0 * (k + 1) for k, p in enumerate(running)}
    policy = BackfillPolicy(
        now=0.0,
        ends_at=lambda held: ends.get(held.pod.uid),
        runtime_s=lambda pod: 1000.0,
        fair_order=fair_order,
    )
    return list(schedule_batch(fw, snapshot, batch, backfill=policy).reservations)


def test_one_reservation_per_queue_its_head() -> None:
    """Two gangs of one queue and one of another fail: the first gang of each queue holds a
    reservation, the second gang of the first queue none."""
    batch = [
        *in_queue("a", gang("first", 2, 4)),
        *in_queue("a", gang("second", 2, 4)),
        *in_queue("b", gang("other", 2, 4)),
    ]
    reservations = reserved_on_full_nodes(2, batch, by_namespace({"a": 0.0, "b": 0.1}))
    assert sorted(r.key for r in reservations) == ["first", "other"]


def test_owners_in_no_queue_hold_up_to_the_limit_of_reservations() -> None:
    """Without ClusterQueues every pod's queue is "": that is no queue, so two 8-GPU pods that
    fail each hold a node (not one for the whole cluster)."""
    batch = [make_pod(f"whole-{k}").gpus(8).build() for k in range(3)]
    held = reserved_on_full_nodes(3, batch, FairOrder(lambda pod: "", {}))
    assert sorted(r.key for r in held) == ["whole-0", "whole-1"]  # max_reservations: 2
    assert not set(held[0].nodes) & set(held[1].nodes)


@settings(max_examples=60, deadline=None)
@given(
    held=st.lists(
        st.tuples(st.sampled_from([1, 2, 4]), st.floats(min_value=1, max_value=500)),
        min_size=4,
        max_size=10,
    ),
    batch=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),  # queue
            st.sampled_from([1, 2]),  # pods (2: a gang)
            st.sampled_from([1, 2, 4, 8]),  # GPUs per pod
            st.floats(min_value=1, max_value=1000),  # predicted run time
        ),
        min_size=1,
        max_size=8,
    ),
    shares=st.tuples(*[st.sampled_from([0.0, 0.2, 0.5])] * 3),
)
def test_a_reservation_holds_its_nodes_against_every_pod_that_would_delay_it(
    held: list[tuple[int, float]],
    batch: list[tuple[str, int, int, float]],
    shares: tuple[float, float, float],
) -> None:
    """Property: reservations are disjoint and one per queue, and a pod tried after a
    reservation was made lands on its nodes only if it is the owner, of a queue ahead of the
    owner's in the fair order, or predicted to end before the reservation completes."""
    fw = framework()
    snapshot = ClusterSnapshot([make_node(f"n{k}").topology("dgx-h100").build() for k in range(2)])
    running = [make_pod(f"old-{k}").gpus(g).build() for k, (g, _) in enumerate(held)]
    schedule_batch(fw, snapshot, running)
    ends = {p.uid: end for p, (_, end) in zip(running, held, strict=True)}
    pods: list[PodRequest] = []
    runtime: dict[str, float] = {}
    for k, (queue, count, gpus, run) in enumerate(batch):
        members = (
            gang(f"w{k}", count, gpus) if count > 1 else [make_pod(f"w{k}").gpus(gpus).build()]
        )
        pods += in_queue(queue, members)
        runtime.update({p.uid: run for p in members})
    order = by_namespace(dict(zip("abc", shares, strict=True)))
    policy = BackfillPolicy(
        now=0.0,
        ends_at=lambda h: ends.get(h.pod.uid),
        runtime_s=lambda pod: runtime[pod.uid],
        large_pod_gpus=4,
        fair_order=order,
    )
    outcome = schedule_batch(fw, snapshot, pods, backfill=policy)
    reserved = [set(r.nodes) for r in outcome.reservations]
    assert sum(len(n) for n in reserved) == len(set().union(*reserved))
    owners = {p.gang.name if p.gang else p.uid: p for p in pods}
    queues = [order.queue_of(owners[r.key]) for r in outcome.reservations]
    assert len(queues) == len(set(queues))
    position = {p.uid: k for k, p in enumerate(pods)}
    for r in outcome.reservations:
        owner = owners[r.key]
        placed = [*outcome.placed, *(d for g in outcome.gangs for d in g)]
        for d in placed:
            pod = d.pod
            assert d.placement is not None
            if d.placement.node not in r.nodes or position[pod.uid] < position[owner.uid]:
                continue
            own = (pod.gang.name if pod.gang else pod.uid) == r.key
            ahead = order.rank(pod) < order.rank(owner)
            assert own or ahead or runtime[pod.uid] <= r.complete_at


# What a node may hold while an 8-GPU pod waits: whole-GPU batch pods, and shares of a GPU that
# are batch, online or opportunistic (the last a victim of the waiting pod's priority).
HOLDERS = st.tuples(
    st.sampled_from(["gpus-1", "gpus-2", "gpus-4", "batch-500", "online-250", "opportunistic-500"]),
    st.floats(min_value=1, max_value=5000),
)


def holder(name: str, kind: str, node: str) -> PodRequest:
    shape, size = kind.split("-")
    pod = make_pod(name).selector(slot=node).priority(0 if shape == "opportunistic" else 100)
    if shape == "gpus":
        return pod.gpus(int(size)).build()
    service_class = ServiceClass(shape) if shape != "batch" else ServiceClass.BATCH
    return replace(pod.share(int(size)).build(), service_class=service_class)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.lists(
        st.tuples(st.tuples(st.sampled_from([1, 2]), st.floats(1, 5000)), st.lists(HOLDERS)),
        min_size=2,
        max_size=4,
    )
)
def test_a_reservation_lands_on_the_node_predicted_to_free_first(
    nodes: list[tuple[tuple[int, float], list[tuple[str, float]]]],
) -> None:
    """Property (issue 37): an 8-GPU pod that fits nowhere (and may not preempt pods of its own
    priority) reserves the node whose holders are
    predicted to end first, counting GPU shares (a GPU is whole once all its shares end) and not
    waiting for opportunistic pods it may preempt; it completes when that node is empty."""
    fw = framework()
    names = [f"n{k}" for k in range(len(nodes))]
    snapshot = ClusterSnapshot(
        [make_node(n).topology("dgx-h100").labels(slot=n).build() for n in names]
    )
    ends: dict[str, float] = {}
    for node, ((first_gpus, first_end), others) in zip(names, nodes, strict=True):
        pods = [holder(f"{node}-first", f"gpus-{first_gpus}", node)]
        pods += [holder(f"{node}-{k}", kind, node) for k, (kind, _) in enumerate(others)]
        ends.update(zip([p.uid for p in pods], [first_end, *(e for _, e in others)], strict=True))
        for pod in pods:
            fw.schedule_one(pod, snapshot)  # placed (and held) where it fits, else dropped
    empty_at = {
        node: max(
            ends[h.pod.uid]
            for h in snapshot.pods.on_node[snapshot.index[node]].values()
            if h.pod.service_class is not ServiceClass.OPPORTUNISTIC
        )
        for node in names
    }
    policy = BackfillPolicy(
        now=0.0, ends_at=lambda h: ends[h.pod.uid], runtime_s=lambda pod: None, horizon_s=1e5
    )
    big = make_pod("big").gpus(8).priority(100).build()
    outcome = schedule_batch(fw, snapshot, [big], backfill=policy)
    (reservation,) = outcome.reservations
    assert reservation.complete_at == min(empty_at.values())
    (node,) = reservation.nodes
    assert empty_at[node] == reservation.complete_at


def test_the_reservation_skips_a_node_that_another_8_gpu_pod_holds_longer() -> None:
    """The over-request run's case (issue 37): one node runs an 8-GPU pod for another hour; the
    other holds 1-GPU pods ending in 10 minutes and research shares that never end on their own.
    The waiting 8-GPU pod reserves the second node (it used to reserve the first: GPU shares
    were never counted as freeing)."""
    fw = framework()
    snapshot = ClusterSnapshot(
        [make_node(n).topology("dgx-h100").labels(slot=n).build() for n in ("a", "b")]
    )
    other = holder("other-8", "gpus-8", "a")
    small = [holder(f"small-{k}", "gpus-1", "b") for k in range(6)]
    sweeps = [holder(f"sweep-{k}", "opportunistic-500", "b") for k in range(4)]
    for pod in [other, *small, *sweeps]:
        assert fw.schedule_one(pod, snapshot).placement is not None
    ends = {other.uid: 3600.0, **{p.uid: 600.0 for p in small}}
    policy = BackfillPolicy(
        now=0.0, ends_at=lambda h: ends.get(h.pod.uid), runtime_s=lambda pod: None
    )
    big = make_pod("big").gpus(8).priority(100).build()
    (reservation,) = schedule_batch(fw, snapshot, [big], backfill=policy).reservations
    assert reservation.nodes == ("b",)
    assert reservation.complete_at == 600.0
