"""Reservations and backfill, so that gangs and large pods do not starve behind small pods
(issue 18; the reservation-and-backfill scheme of batch schedulers such as Slurm's backfill and
Volcano's reserve action).

When a gang (or a pod of at least `large_pod_gpus` GPUs) at the head of the batch cannot be placed,
the nodes where its pods would fit soonest, by the predicted ends of what they hold, are reserved
for it: `complete_at` is the predicted moment they hold enough free GPUs for all of its missing
pods. The plan goes GPU by GPU: a GPU is whole and free once the last pod on it has ended, GPU
shares included, and an opportunistic pod the owner may preempt counts as gone already (counting
whole-GPU pods alone, a node with any share on it never freed, and an 8-GPU pod's reservation
could only go to a node that another 8-GPU pod held: issue 37). Other pods may use a reserved
node only if they are predicted (p90) to finish before `complete_at` (backfill); pods with no
prediction may not. The reservation is recomputed every
batch from what is known then, so it follows the predictions as they change.

With a fair-share order (`FairOrder`: each pod's queue and each queue's dominant share, as DRS
ranks them), reservations follow it, as the issue asks of a queue's head: at most one per queue
(the first of its owners to fail, so the batch should come in the fair-share order), and a
reservation holds its nodes only against pods of queues at or behind its owner's in that order.
Pods in no queue (no ClusterQueue: the queue is "") are not one queue: their owners are bounded by
`max_reservations` alone (counted as one queue, one 8-GPU pod drained a node at a time for the
whole cluster while others arrived faster: issue 37's over-request run).
A queue within its share (share 0) is not kept off nodes held for a queue that borrows: fair
sharing serves it first, and a reservation must not undo that.

A reservation outlives a batch its owner is not in (backing off after a failed attempt, or behind
the batch's end) for `absent_grace_s` after the owner was last tried: the scheduler runs a batch
every second or so, and an owner tried only every few seconds would otherwise hold its nodes in one
batch of ten, the others filling them. It goes when its owner starts.

Bounded: a reservation whose predicted completion lies beyond `horizon_s`, or that has been held
for longer than `horizon_s` without its owner starting, is released and reported with the reason,
and its owner may not reserve again for another `horizon_s` (idle capacity is never held
indefinitely on a prediction that keeps slipping).

Starvation bound (issue 37; Slurm's backfill reserves for its highest-priority waiting jobs
and backfills only what does not delay them): an owner that has waited `starving_after_s` since
it was created is starving. Its reservation holds its nodes against the pods of every queue, the
fair-share order notwithstanding (a big gang of a heavy tenant otherwise waits behind the small
pods of lighter ones for as long as they keep coming), is neither released nor refused for the
horizon (a prediction that slips only lets more pods backfill before it completes), and its
owner may have consolidation move work for it whenever it fails (not only when its plan lies
beyond the horizon). At most `max_reservations` starving owners hold nodes at once, the first to
fail in the batch (the oldest, where the batch comes oldest-starving first), beside the ordinary
reservations and their limits.

The GPU arithmetic here is by whole-GPU counts per node; whether the pods really fit (topology,
CPU, selectors) is always decided by the framework when they are tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduling.core.pod_index import HeldPod
from scheduling.core.scheduler import Decision
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import MILLI_PER_GPU, PodRequest, ServiceClass

BoolArray = npt.NDArray[np.bool_]
DEFAULT_HORIZON_S = 6 * 3600.0
DEFAULT_STARVING_AFTER_S = DEFAULT_HORIZON_S
STARVING_RANK = -math.inf  # ahead of every queue in the fair-share order


@dataclass(frozen=True)
class Reservation:
    key: str  # the gang's name, or the large pod's uid
    nodes: tuple[str, ...]
    complete_at: float  # predicted moment the nodes hold all it needs
    since: float


@dataclass(frozen=True)
class ReleasedReservation:
    key: str
    nodes: tuple[str, ...]
    reason: str


@dataclass
class ReservationBook:
    """What outlives a batch: since when each owner holds a reservation, and who was released."""

    since: dict[str, float] = field(default_factory=dict)
    nodes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    released_at: dict[str, float] = field(default_factory=dict)
    active: dict[str, Reservation] = field(default_factory=dict)  # after the latest batch
    # When each owner was last tried, and its queue and fair-share rank then: what a reservation
    # carried through a batch without its owner is judged by.
    tried_at: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, tuple[str, float]] = field(default_factory=dict)

    def copy(self) -> ReservationBook:
        """The holds and releases, for a replay that starts from them (estimated starts): what
        the replay's own batches reserve is its own."""
        return ReservationBook(dict(self.since), dict(self.nodes), dict(self.released_at))


def owner_key(pod: PodRequest) -> str:
    """What a reservation is held for: the pod's gang, or the pod itself."""
    return pod.gang.name if pod.gang is not None else pod.uid


@dataclass(frozen=True)
class FairOrder:
    """The fair-share order reservations follow: the queue of a pod, and each queue's share
    (lower: served first; a queue not listed counts as 0)."""

    queue_of: Callable[[PodRequest], str]
    share: Mapping[str, float]

    def rank(self, pod: PodRequest) -> float:
        return self.share.get(self.queue_of(pod), 0.0)


@dataclass
class BackfillPolicy:
    now: float
    ends_at: Callable[[HeldPod], float | None]  # predicted end of what a node holds (p50)
    runtime_s: Callable[[PodRequest], float | None]  # predicted run time (p90) of a waiting pod
    book: ReservationBook = field(default_factory=ReservationBook)
    horizon_s: float = DEFAULT_HORIZON_S
    large_pod_gpus: int = 4
    max_reservations: int = 2
    fair_order: FairOrder | None = None  # None: reservations go to the first owners that fail
    absent_grace_s: float = 30.0  # a reservation kept through batches its owner is not in
    # The starvation bound (module doc); None: none
    starving_after_s: float | None = DEFAULT_STARVING_AFTER_S

    def starving(self, created_at: float) -> bool:
        """Whether an owner created then has waited past the starvation bound."""
        return self.starving_after_s is not None and self.now - created_at >= self.starving_after_s


def hosts(decision: Decision) -> BoolArray:
    """Nodes where the pod failed only for reasons that go away as pods end."""
    size = len(decision.node_names)
    out: BoolArray = np.ones(size, dtype=np.bool_)
    for _, verdicts in decision.filters:
        hard = np.array([False, *verdicts.unresolvable], dtype=np.bool_)
        out &= ~hard[verdicts.codes]
    return out


def plan(
    snapshot: ClusterSnapshot,
    gpus_per_pod: int,
    missing: int,
    candidates: BoolArray,
    ends_at: Callable[[HeldPod], float | None],
    now: float,
    prefer: Iterable[str] = (),
    unknown_end: float | None = None,
    gone_now: Callable[[HeldPod], bool] | None = None,
) -> tuple[float, tuple[str, ...]] | None:
    """The earliest predicted moment the candidate nodes hold `missing` pods of `gpus_per_pod`
    whole free GPUs, and the fewest nodes that do then, those that got there first (None: the
    known ends never free enough). A GPU is whole and free once everything on it has ended,
    shares included; a pod with no predicted end is taken to end at `unknown_end` (None: never),
    one `gone_now` says is gone (a victim the owner preempts) at once."""
    if gpus_per_pod <= 0 or missing <= 0:
        return None
    free_at = {
        int(row): gpu_free_times(snapshot, int(row), ends_at, now, unknown_end, gone_now)
        for row in np.flatnonzero(candidates)
    }
    # Sweep the GPUs' free times in order until the nodes hold enough pods' worth of them.
    freed = sorted((t, row) for row, times in free_at.items() for t in times if t < np.inf)
    count = dict.fromkeys(free_at, 0)
    total, at = 0, None
    for k, (t, row) in enumerate(freed):
        count[row] += 1
        total += count[row] % gpus_per_pod == 0
        if total >= missing and (k + 1 == len(freed) or freed[k + 1][0] > t):
            at = t
            break
    if at is None:
        return None
    slots = {row: n // gpus_per_pod for row, n in count.items() if n >= gpus_per_pod}
    # when each node came to hold its slots: the last GPU they need freed then
    reached = {row: sorted(free_at[row])[n * gpus_per_pod - 1] for row, n in slots.items()}
    preferred = set(prefer)
    order = sorted(
        reached,
        key=lambda i: (
            -min(slots[i], missing),
            reached[i],
            snapshot.names[i] not in preferred,
            snapshot.names[i],
        ),
    )
    chosen: list[str] = []
    held = 0
    for row in order:
        chosen.append(snapshot.names[row])
        held += slots[row]
        if held >= missing:
            break
    return at, tuple(chosen)


def gpu_free_times(
    snapshot: ClusterSnapshot,
    row: int,
    ends_at: Callable[[HeldPod], float | None],
    now: float,
    unknown_end: float | None = None,
    gone_now: Callable[[HeldPod], bool] | None = None,
) -> list[float]:
    """When each GPU of the node is predicted whole and free: now if it is, else when the last
    pod on it ends (inf: never, or not a whole GPU). Shares lent out of a GPU's idle part do not
    keep it from its owner (reclaim takes them back)."""
    free = snapshot.gpu_free[row].tolist()
    times = [now if milli == MILLI_PER_GPU else np.inf for milli in free]
    last: dict[int, float] = {}
    for held in snapshot.pods.on_node[row].values():
        if held.placement.reclaimed or not held.placement.gpu_indices:
            continue
        if gone_now is not None and gone_now(held):
            end: float | None = now
        else:
            end = ends_at(held)
            end = unknown_end if end is None else max(now, end)
        for gpu in held.placement.gpu_indices:
            last[gpu] = max(last.get(gpu, now), np.inf if end is None else end)
    for gpu, end in last.items():
        times[gpu] = end
    return [t for t, milli in zip(times, free, strict=True) if milli >= 0]


def _preempted_by(held: PodRequest, owner: PodRequest) -> bool:
    """An opportunistic pod the owner may preempt: gone as soon as the owner needs its GPUs
    (what a reservation holds is never kept from the owner by one: see `blocked_for`)."""
    return (
        held.service_class is ServiceClass.OPPORTUNISTIC
        and owner.can_preempt
        and held.priority < owner.priority
    )


@dataclass
class _Hold:
    """A reservation in force in this batch: its nodes, and who it holds them against."""

    mask: BoolArray
    complete_at: float
    queue: str
    rank: float

    @property
    def starving(self) -> bool:
        return self.rank == STARVING_RANK


class Reserver:
    """The reservations of one batch: carried over for owners not in it, made as owners fail,
    consulted before every attempt."""

    def __init__(self, snapshot: ClusterSnapshot, policy: BackfillPolicy) -> None:
        self.snapshot, self.policy = snapshot, policy
        self.made: dict[str, Reservation] = {}
        self.released: list[ReleasedReservation] = []
        self.seen: set[str] = set()
        # Owners whose reservation cannot complete within the horizon (released in this batch,
        # or lately): what consolidation may help (scheduling.core.queueing.consolidation).
        self.beyond_horizon: set[str] = set()
        self._holds: dict[str, _Hold] = {}
        self._carried: set[str] = set()
        self._nothing: BoolArray = np.zeros(len(snapshot), dtype=np.bool_)  # read, never written
        book, now = policy.book, policy.now
        for key, reservation in book.active.items():
            if now - book.tried_at.get(key, -np.inf) <= policy.absent_grace_s:
                queue, rank = book.ranks.get(key, ("", 0.0))
                if self._hold(reservation, queue, rank):
                    self._carried.add(key)

    def _hold(self, reservation: Reservation, queue: str, rank: float) -> bool:
        rows = [self.snapshot.index[n] for n in reservation.nodes if n in self.snapshot.index]
        if not rows:
            return False
        mask: BoolArray = np.zeros(len(self.snapshot), dtype=np.bool_)
        mask[rows] = True
        self.made[reservation.key] = reservation
        self._holds[reservation.key] = _Hold(mask, reservation.complete_at, queue, rank)
        return True

    def _drop(self, key: str) -> None:
        self.made.pop(key, None)
        self._holds.pop(key, None)
        self._carried.discard(key)

    def _rank(self, pod: PodRequest) -> float:
        """The pod's place in the fair-share order; a starving owner's is ahead of all."""
        owner = pod.gang is not None or pod.gpus >= self.policy.large_pod_gpus
        if owner and self.policy.starving(pod.created_at):
            return STARVING_RANK
        order = self.policy.fair_order
        return order.rank(pod) if order is not None else 0.0

    def _blocked(self) -> BoolArray:
        out: BoolArray = np.zeros(len(self.snapshot), dtype=np.bool_)
        for hold in self._holds.values():
            out |= hold.mask
        return out

    def blocked_for(self, pod: PodRequest) -> BoolArray:
        """The reserved nodes this pod may not use: all of them, except its own reservation's
        and those it is predicted to leave before they are needed."""
        if not self._holds or pod.service_class is ServiceClass.OPPORTUNISTIC:
            # An opportunistic pod is always a victim for the pods reservations are made for
            # (preemption takes it back), and often on lent capacity that frees nothing: never
            # in their way.
            return self._nothing
        out: BoolArray = np.zeros(len(self.snapshot), dtype=np.bool_)
        own = owner_key(pod)
        runtime = self.policy.runtime_s(pod)
        rank = self._rank(pod)
        for key, hold in self._holds.items():
            if key == own or rank < hold.rank:  # its own, or ahead of it in the fair order
                continue
            if runtime is None or self.policy.now + runtime > hold.complete_at:
                out |= hold.mask
        return out

    def started(self, pod: PodRequest) -> None:
        """An owner was placed: its reservation ends."""
        key = owner_key(pod)
        self._drop(key)
        self.seen.discard(key)

    def failed(self, members: Sequence[PodRequest], missing: int, decision: Decision) -> None:
        """An owner could not be placed: reserve for it, or release what it held and say why."""
        pod = members[0]
        key = owner_key(pod)
        if pod.gang is None and pod.gpus < self.policy.large_pod_gpus:
            return
        self._drop(key)  # carried from an earlier batch: judged afresh
        order = self.policy.fair_order
        queue = order.queue_of(pod) if order is not None else ""
        rank = self._rank(pod)
        if rank == STARVING_RANK:
            self._starving_failed(pod, key, missing, decision, queue)
            return
        ordinary = [h for h in self._holds.values() if not h.starving]
        if order is not None and queue and any(h.queue == queue for h in ordinary):
            return  # one per queue, its head's: this one holds nothing (settle forgets it)
        self.seen.add(key)
        book, now, horizon = self.policy.book, self.policy.now, self.policy.horizon_s
        book.tried_at[key] = now
        if len(ordinary) >= self.policy.max_reservations:
            return
        if now - book.released_at.get(key, -np.inf) < horizon:
            self.beyond_horizon.add(key)
            return  # released lately: waits like anyone else for a while
        found = self._plan(pod, key, missing, decision)
        since = book.since.get(key, now)
        reason = ""
        if found is None:
            reason = "no predicted end frees the GPUs it needs"
        elif found[0] - now > horizon:
            reason = (
                f"the GPUs it needs would be free in {(found[0] - now) / 3600:.1f} h, beyond "
                f"the {horizon / 3600:g} h horizon"
            )
        elif now - since > horizon:
            reason = f"held for {(now - since) / 3600:.1f} h without starting"
        if reason:
            self._release(key, reason)
            self.beyond_horizon.add(key)
            return
        assert found is not None
        self._keep(key, found, since, queue, rank)

    def _starving_failed(
        self, pod: PodRequest, key: str, missing: int, decision: Decision, queue: str
    ) -> None:
        """A starving owner failed: it holds the nodes it needs soonest, however far off, and
        consolidation may open nodes for it (module doc)."""
        self.seen.add(key)
        book, now = self.policy.book, self.policy.now
        book.tried_at[key] = now
        self.beyond_horizon.add(key)
        if sum(h.starving for h in self._holds.values()) >= self.policy.max_reservations:
            return
        found = self._plan(pod, key, missing, decision)
        if found is not None:
            self._keep(key, found, book.since.get(key, now), queue, STARVING_RANK)

    def _plan(
        self, pod: PodRequest, key: str, missing: int, decision: Decision
    ) -> tuple[float, tuple[str, ...]] | None:
        """The owner's plan on the nodes that could host it and no one holds yet."""
        book, now, horizon = self.policy.book, self.policy.now, self.policy.horizon_s
        return plan(
            self.snapshot,
            pod.gpus,
            missing,
            hosts(decision) & ~self._blocked(),
            self.policy.ends_at,
            now,
            book.nodes.get(key, ()),
            unknown_end=now + horizon,
            gone_now=lambda held: _preempted_by(held.pod, pod),
        )

    def _keep(
        self,
        key: str,
        found: tuple[float, tuple[str, ...]],
        since: float,
        queue: str,
        rank: float,
    ) -> None:
        complete_at, nodes = found
        book = self.policy.book
        book.since[key] = since
        book.nodes[key] = nodes
        book.ranks[key] = (queue, rank)
        self._hold(Reservation(key, nodes, complete_at, since), queue, rank)

    def _release(self, key: str, reason: str) -> None:
        book = self.policy.book
        if key in book.since:
            self.released.append(ReleasedReservation(key, book.nodes.get(key, ()), reason))
            book.released_at[key] = self.policy.now
        book.since.pop(key, None)
        book.nodes.pop(key, None)

    def settle(self) -> None:
        """After the batch: owners that started, left or stayed away too long hold nothing any
        more."""
        book = self.policy.book
        keep = self.seen | self._carried
        for key in list(book.since):
            if key not in keep:
                book.since.pop(key, None)
                book.nodes.pop(key, None)
        for table in (book.tried_at, book.ranks):
            for key in [k for k in table if k not in keep]:
                del table[key]
        horizon, now = self.policy.horizon_s, self.policy.now
        for key, at in list(book.released_at.items()):
            if now - at >= horizon:
                del book.released_at[key]
        book.active = dict(self.made)
