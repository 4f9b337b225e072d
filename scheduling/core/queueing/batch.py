"""Scheduling a batch of pods into a snapshot with gangs placed all or nothing, and why pods wait.

`schedule_batch` runs the framework pod by pod. Members of one gang are tried back to back (at
the place of the gang's first member in queue order), each reserved in the snapshot as it goes
(Coscheduling's Permit says Wait until the quorum). Once the gang's last member has been tried it
is settled: with at least `minCount` members held (reserved now, or bound in an earlier cycle) all
reserved members are permitted together and must be bound together; otherwise every reserved
member is forgotten at once. Nothing of an incomplete gang outlives the batch, so gangs cannot
deadlock each other. When a gang can no longer reach its quorum, its remaining members are not
even tried.

A non-gang pod that fits nowhere may be helped by preemption: the framework's PostFilter nominated
victims. Nothing is evicted here: the batch returns an eviction *intent* (the victims' whole
workloads, the reason, the preemptor) that the shell carries out after the batch. Where evicted
pods are gone at once (the database side), the victims are forgotten in the snapshot and the pod
is tried again within the batch; where they terminate first (Kubernetes: a grace period), they
keep what they hold, are marked terminating so nobody picks them again, and the pod waits
nominated to the node, as kube-scheduler's preemptor does. The node stays held for it against pods
of lower or equal priority, across batches, until it is placed or its nomination ends, whether it
is in the batch or not (`NominatedPod`: backing off, or beyond the batch's end), as
kube-scheduler's nominator counts a nominated pod on its node. A gang that cannot be placed may be
helped the same way by the caller's `reclaim_gang` hook, which only chooses victims; and a gang
whose reservation cannot complete within the horizon by the `consolidate_gang` hook, which moves
movable work off the nodes it needs (scheduling.core.queueing.consolidation), the same way.

With a `BackfillPolicy`, a gang or large pod that cannot be placed reserves the nodes where it
would fit soonest, and pods behind it use those nodes only if predicted to finish before it needs
them (scheduling.core.queueing.backfill); the reservations made and released are in the outcome.

A pod set with a topology request across nodes (Kueue's TAS: a rack, a block, an NVLink domain)
is tried only inside the domains scheduling.core.domains chooses for it
(scheduling.core.queueing.pod_set_domains); when no domain of its level holds it, its pods wait
with the reason naming the level and what the best domain had.

`classify` turns a failed decision into a pending reason: WaitingForGang, TopologyPlacementFailed
(some node has the resources but not the GPU topology asked for, or no domain of the level asked
for holds the pod set), or NoFit with the per-plugin node reasons summarized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.domains import PLUGIN as DOMAINS_PLUGIN
from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.admission import (
    NO_FIT,
    TOPOLOGY_PLACEMENT_FAILED,
    WAITING_FOR_GANG,
)
from scheduling.core.queueing.backfill import (
    BackfillPolicy,
    BoolArray,
    ReleasedReservation,
    Reservation,
    Reserver,
)
from scheduling.core.queueing.pod_set_domains import domain_masks
from scheduling.core.reclaim import ONLINE_HOLDS_THE_GPU, gpu_name, reclaimed_reason
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import PodRequest, ServiceClass

TOPOLOGY_PLUGINS = frozenset({"GPUTopology", "GPUTopologyAware"})


@dataclass(frozen=True)
class Eviction:
    """Pods to evict, whole workloads, and why: what the shell carries out after the batch."""

    victims: tuple[HeldPod, ...]
    reason: str
    preemptor: PodRequest | None = None
    node: str = ""  # the node emptied for the preemptor ("" when it spans nodes)


@dataclass(frozen=True)
class NominatedPod:
    """A pending pod nominated to a node (status.nominatedNodeName): the node emptied for it."""

    uid: str
    node: str
    priority: int


# Called with a gang that could not be placed: the pods whose eviction would let it fit (None:
# no such set). Reads only; the batch decides what to do with them.
GangReclaimHook = Callable[[Sequence[PodRequest]], Eviction | None]


@dataclass
class BatchOutcome:
    placed: list[Decision] = field(default_factory=list)  # single pods, each bound on its own
    gangs: list[list[Decision]] = field(default_factory=list)  # each bound in one transaction
    failed: list[Decision] = field(default_factory=list)
    evictions: list[Eviction] = field(default_factory=list)
    # Preemptors waiting for their victims to terminate: pod uid -> the node emptied for it.
    nominated: dict[str, str] = field(default_factory=dict)
    preemptions: int = 0
    reservations: list[Reservation] = field(default_factory=list)
    released: list[ReleasedReservation] = field(default_factory=list)

    @property
    def placed_pods(self) -> int:
        return len(self.placed) + sum(len(g) for g in self.gangs)


def gang_order(pods: Sequence[PodRequest]) -> list[PodRequest]:
    """`pods` in the same order, except that every gang's members follow its first member."""
    members: dict[str, list[PodRequest]] = {}
    for pod in pods:
        if pod.gang is not None:
            members.setdefault(pod.gang.name, []).append(pod)
    out: list[PodRequest] = []
    for pod in pods:
        if pod.gang is None:
            out.append(pod)
        elif pod.gang.name in members:
            out.extend(members.pop(pod.gang.name))
    return out


def schedule_batch(
    framework: Framework,
    snapshot: ClusterSnapshot,
    pods: Sequence[PodRequest],
    *,
    evictions_free_at_once: bool = True,
    reclaim_gang: GangReclaimHook | None = None,
    backfill: BackfillPolicy | None = None,
    consolidate_gang: GangReclaimHook | None = None,
    nominated: Sequence[NominatedPod] = (),
) -> BatchOutcome:
    """`nominated`: every pending pod nominated to a node, in the batch or not."""
    reserver = Reserver(snapshot, backfill) if backfill is not None else None
    batch = _Batch(framework, snapshot, evictions_free_at_once, reserver)
    ordered = gang_order(pods)
    k = 0
    try:
        batch.nominated_first(ordered, nominated)
        while k < len(ordered):
            pod = ordered[k]
            if pod.gang is None:
                if pod.uid not in batch.placed_here:  # not placed on its nominated node
                    batch.single(pod)
                k += 1
                continue
            end = k
            while end < len(ordered) and _same_gang(ordered[end], pod):
                end += 1
            batch.gang(ordered[k:end], reclaim_gang, consolidate_gang)
            k = end
    finally:
        snapshot.reservation_blocked = np.zeros(len(snapshot), dtype=np.bool_)
    if reserver is not None:
        reserver.settle()
        batch.outcome.reservations = list(reserver.made.values())
        batch.outcome.released = list(reserver.released)
    return batch.outcome


def _same_gang(a: PodRequest, b: PodRequest) -> bool:
    return a.gang is not None and b.gang is not None and a.gang.name == b.gang.name


class _Batch:
    def __init__(
        self,
        framework: Framework,
        snapshot: ClusterSnapshot,
        at_once: bool,
        reserver: Reserver | None,
    ) -> None:
        self.framework, self.snapshot, self.at_once = framework, snapshot, at_once
        self.reserver = reserver
        self.outcome = BatchOutcome()
        self.placed_here: set[str] = set()  # reserved in this batch, not bound: never victims
        # Node index -> (uid, priority) of the preemptor it is being emptied for, until placed.
        self.preemptors: dict[int, tuple[str, int]] = {}
        self._unblocked: BoolArray = np.zeros(len(snapshot), dtype=np.bool_)

    def _respect_reservations(self, pod: PodRequest) -> None:
        blocked = self.reserver.blocked_for(pod) if self.reserver is not None else self._unblocked
        if self.preemptors:  # only while a preemptor waits: most batches have none
            blocked = blocked | self._held_for_preemptors(pod)
        self.snapshot.reservation_blocked = blocked

    def _held_for_preemptors(self, pod: PodRequest) -> BoolArray:
        """The nodes emptied for a waiting preemptor of at least this pod's priority: as
        kube-scheduler counts a nominated pod on its node for pods of lower or equal priority,
        so that they do not take what was freed for it (it would then preempt again). Here the
        whole node is held, until the preemptor is placed."""
        out: BoolArray = np.zeros(len(self.snapshot), dtype=np.bool_)
        for i, (uid, priority) in self.preemptors.items():
            if uid != pod.uid and priority >= pod.priority:
                out[i] = True
        return out

    def nominated_first(
        self, pods: Sequence[PodRequest], nominated: Sequence[NominatedPod] = ()
    ) -> None:
        """As kube-scheduler does, a preemptor whose victims are gone tries its nominated node
        first, before any other pod of the batch, so that the capacity freed for it is not
        taken by the pods ahead of it (which would make it preempt again elsewhere). The nodes
        of the preemptors not placed so far are held for them, and so are those of the
        nominated pods not in the batch: a cycle that a preemptor sits out (its backoff) let
        lower-priority pods refill the node being emptied for it, which it then preempted
        again, cycle after cycle (issue 37 item 2)."""
        snapshot = self.snapshot
        for pod in pods:
            node = pod.nominated_node
            if pod.gang is not None or node not in snapshot.index or snapshot.emptying(node):
                continue
            snapshot.reservation_blocked = np.ones(len(snapshot), dtype=np.bool_)
            snapshot.reservation_blocked[snapshot.index[node]] = False
            decision = self._alone_on_its_gpus(self.framework.schedule_one(pod, snapshot))
            if decision.placement is not None:
                self._placed(decision)
        for pod in pods:
            node = pod.nominated_node
            if pod.gang is None and pod.uid not in self.placed_here and node in snapshot.index:
                self._hold(snapshot.index[node], pod.uid, pod.priority)
        in_batch = {pod.uid for pod in pods}
        for waiting in nominated:
            if waiting.uid not in in_batch and waiting.node in snapshot.index:
                self._hold(snapshot.index[waiting.node], waiting.uid, waiting.priority)

    def _hold(self, i: int, uid: str, priority: int) -> None:
        held = self.preemptors.get(i)
        if held is None or held[1] < priority:
            self.preemptors[i] = (uid, priority)

    def _release_holds(self, pod: PodRequest) -> None:
        self.preemptors = {i: h for i, h in self.preemptors.items() if h[0] != pod.uid}

    def single(self, pod: PodRequest) -> None:
        self._respect_reservations(pod)
        masks = domain_masks(self.framework, self.snapshot, [pod])
        if isinstance(masks, Status):
            self._refused_by_domains([pod], masks)
            return
        if masks is not None:  # one pod: anywhere inside the domain chosen for it
            self.snapshot.reservation_blocked = self.snapshot.reservation_blocked | masks[-1]
        decision = self.framework.schedule_one(pod, self.snapshot)
        nomination = decision.nomination
        if decision.placement is None and nomination is not None:
            victims = self._whole_workloads(nomination.victims)
            if victims is not None:
                eviction = Eviction(
                    victims,
                    _preempted_by(pod, nomination.nominated_node),
                    pod,
                    nomination.nominated_node,
                )
                decision = self._carry_out(eviction, decision, lambda: self._retry(pod))
        decision = self._alone_on_its_gpus(decision)
        if decision.placement is not None:
            self._placed(decision)
            self._release_holds(pod)
        else:
            self.outcome.failed.append(decision)
            if pod.uid in self.outcome.nominated:
                self._hold(
                    self.snapshot.index[self.outcome.nominated[pod.uid]], pod.uid, pod.priority
                )
            elif not (pod.nominated_node and self.snapshot.emptying(pod.nominated_node)):
                self._release_holds(pod)  # its nomination is over: it no longer waits there
            if self.reserver is not None and pod.uid not in self.outcome.nominated:
                self.reserver.failed([pod], 1, decision)

    def _placed(self, decision: Decision) -> None:
        self.placed_here.add(decision.pod.uid)
        self.outcome.placed.append(decision)
        if self.reserver is not None:
            self.reserver.started(decision.pod)

    def gang(
        self,
        members: Sequence[PodRequest],
        reclaim: GangReclaimHook | None,
        consolidate: GangReclaimHook | None = None,
    ) -> None:
        self._respect_reservations(members[0])
        attempt = self._try_in_domains(members)
        if attempt is None:
            return  # its topology request cannot be placed now: told why
        if not attempt.complete and reclaim is not None:
            attempt = self._evict_for(members, reclaim(members), attempt)
        if not attempt.complete and self.reserver is not None and attempt.failed:
            gang = members[0].gang
            assert gang is not None
            missing = gang.min_count - attempt.already
            self.reserver.failed(members, missing, attempt.failed[0])
            if consolidate is not None and gang.name in self.reserver.beyond_horizon:
                attempt = self._evict_for(members, consolidate(members), attempt)
        if attempt.complete:
            self.placed_here.update(d.pod.uid for d in attempt.reserved)
            if self.reserver is not None:
                self.reserver.started(members[0])
        _settle_gang(self.snapshot, members, attempt, self.outcome)

    def _evict_for(
        self, members: Sequence[PodRequest], eviction: Eviction | None, attempt: _GangAttempt
    ) -> _GangAttempt:
        """Carry out what a gang's hook chose (none of it placed in this batch): where evicted
        pods are gone at once, the gang is tried again now; else they terminate first."""
        if (
            eviction is None
            or not eviction.victims
            or any(v.pod.uid in self.placed_here for v in eviction.victims)
        ):
            return attempt
        self.outcome.evictions.append(eviction)
        self.outcome.preemptions += 1
        if not self.at_once:
            self._mark_terminating(eviction.victims)
            return attempt
        self._forget(eviction.victims)
        self._respect_reservations(members[0])
        return self._try_in_domains(members) or attempt

    def _try_in_domains(self, members: Sequence[PodRequest]) -> _GangAttempt | None:
        """The gang tried inside the topology domains its request asks for (tightest mask
        first), or anywhere without a request; None when its request cannot be placed now (each
        member then fails with the reason, naming the level and what was short)."""
        masks = domain_masks(self.framework, self.snapshot, members)
        if masks is None:
            return _try_gang(self.framework, self.snapshot, members)
        if isinstance(masks, Status):
            self._refused_by_domains(members, masks)
            return None
        base = self.snapshot.reservation_blocked
        try:
            for outside in masks:
                self.snapshot.reservation_blocked = base | outside
                attempt = _try_gang(self.framework, self.snapshot, members)
                if attempt.complete:
                    break
        finally:
            self.snapshot.reservation_blocked = base
        return attempt

    def _refused_by_domains(self, members: Sequence[PodRequest], status: Status) -> None:
        for pod in members:
            self.outcome.failed.append(Decision(pod, status, self.snapshot.names, CycleState()))

    def _alone_on_its_gpus(self, decision: Decision) -> Decision:
        """An online pod placed on GPUs that lend to opportunistic pods gets them to itself: the
        lent pods are evicted (an intent, with the online pod as the reason) and the GPUs lend
        nothing more. Where evicted pods terminate first, the online pod is not placed beside
        them: it waits nominated to the node until they are gone, as a preemptor waits for its
        victims (the node held for it meanwhile, so nobody borrows the GPUs again)."""
        placement, pod = decision.placement, decision.pod
        if (
            placement is None
            or pod.service_class is not ServiceClass.ONLINE
            or not placement.gpu_indices
        ):
            return decision
        snapshot, index = self.snapshot, self.snapshot.pods
        i = snapshot.index[placement.node]
        lending = {g for g in placement.gpu_indices if snapshot.gpu_lent[i, g] > 0}
        if not lending:
            snapshot.stop_lending(i, placement.gpu_indices)
            return decision
        lent = [
            h
            for h in index.on_node[i].values()
            if h.placement.reclaimed and lending & set(h.placement.gpu_indices)
        ]
        names = ",".join(gpu_name((placement.node, g)) for g in sorted(lending))
        going = [h.pod.uid for h in lent if h.pod.uid not in index.terminating]
        victims = self._whole_workloads(going) if going else ()
        if victims is None:  # placed in this very batch, or protected: try again next cycle
            self.framework.forget(decision, snapshot)
            return self._waiting(pod, f"GPU {names} lends to pods that cannot be evicted now")
        if victims:
            self.outcome.evictions.append(
                Eviction(
                    victims, reclaimed_reason(names, ONLINE_HOLDS_THE_GPU), pod, placement.node
                )
            )
            self.outcome.preemptions += 1
        if self.at_once:
            self._forget(victims)
            snapshot.stop_lending(i, placement.gpu_indices)
            return decision
        self._mark_terminating(victims)
        self.framework.forget(decision, snapshot)
        self.outcome.nominated[pod.uid] = placement.node
        return self._waiting(
            pod,
            f"Reclaiming: waiting for {len(lent)} lent pod(s) on GPU {names} to terminate",
        )

    def _waiting(self, pod: PodRequest, message: str) -> Decision:
        return Decision(
            pod,
            Status.of(Code.UNSCHEDULABLE, message, plugin="Reclaim"),
            self.snapshot.names,
            CycleState(),
        )

    def _retry(self, pod: PodRequest) -> Decision:
        return self.framework.schedule_one(pod, self.snapshot)

    def _carry_out(
        self, eviction: Eviction, failed: Decision, retry: Callable[[], Decision]
    ) -> Decision:
        """Record the intent; where evicted pods are gone at once, try the pod again now."""
        self.outcome.evictions.append(eviction)
        self.outcome.preemptions += 1
        if self.at_once:
            self._forget(eviction.victims)
            return retry()
        self._mark_terminating(eviction.victims)
        assert eviction.preemptor is not None
        self.outcome.nominated[eviction.preemptor.uid] = eviction.node
        failed.status = Status.of(
            Code.UNSCHEDULABLE,
            f"Preempting: waiting for {len(eviction.victims)} pod(s) on node {eviction.node} "
            "to terminate",
            plugin="PostFilter",
        )
        return failed

    def _whole_workloads(self, uids: Sequence[str]) -> tuple[HeldPod, ...] | None:
        """The nominated victims with every other held pod of their workloads (an eviction takes
        a workload whole); None when one of them was placed in this batch or may not go."""
        index = self.snapshot.pods
        out: dict[str, HeldPod] = {}
        for uid in uids:
            held = index.held.get(uid)
            if held is None or uid in self.placed_here:
                return None
            members = index.workload_members(held.pod.workload) if held.pod.workload else []
            for member in [held, *members]:
                out.setdefault(member.pod.uid, member)
        if any(uid in self.placed_here or not index.evictable(uid) for uid in out):
            return None
        return tuple(sorted(out.values(), key=lambda h: h.sequence))

    def _forget(self, victims: Sequence[HeldPod]) -> None:
        for victim in victims:
            if victim.pod.uid in self.snapshot.pods:
                self.snapshot.forget(victim.pod, victim.placement)

    def _mark_terminating(self, victims: Sequence[HeldPod]) -> None:
        index = self.snapshot.pods
        index.set_unevictable(
            terminating=index.terminating | {v.pod.uid for v in victims}, protected=index.protected
        )


def _preempted_by(pod: PodRequest, node: str) -> str:
    return (
        f"Preempted by {pod.workload or pod.name} ({pod.service_class.value}, "
        f"priority {pod.priority}) on node {node}"
    )


@dataclass
class _GangAttempt:
    already: int  # members bound in earlier cycles
    reserved: list[Decision]
    failed: list[Decision]
    complete: bool


def _try_gang(
    framework: Framework, snapshot: ClusterSnapshot, members: Sequence[PodRequest]
) -> _GangAttempt:
    """Reserve members until the quorum is reached or out of reach; an incomplete gang's
    reservations are forgotten at once."""
    gang = members[0].gang
    assert gang is not None
    held_before = sum(1 for p in members if p.uid in snapshot.pods)
    already = snapshot.pods.gang_size(gang.name) - held_before
    reserved: list[Decision] = []
    failed: list[Decision] = []
    for tried, pod in enumerate(members):
        if already + len(reserved) + (len(members) - tried) < gang.min_count:
            break  # the quorum is out of reach: do not even try the rest
        decision = framework.schedule_one(pod, snapshot)
        if decision.placement is None:
            failed.append(decision)
        else:
            reserved.append(decision)
    complete = already + len(reserved) >= gang.min_count
    if not complete:
        for decision in reversed(reserved):
            framework.forget(decision, snapshot)
    return _GangAttempt(already, reserved, failed, complete)


def _settle_gang(
    snapshot: ClusterSnapshot,
    members: Sequence[PodRequest],
    attempt: _GangAttempt,
    outcome: BatchOutcome,
) -> None:
    gang = members[0].gang
    assert gang is not None
    if attempt.complete:
        for decision in attempt.reserved:
            decision.status = Status.success()
        outcome.gangs.append(attempt.reserved)
        outcome.failed.extend(attempt.failed)  # members beyond the quorum wait alone
        return
    cause = attempt.failed[0].summary() if attempt.failed else "not tried"
    message = (
        f"{WAITING_FOR_GANG}: {attempt.already + len(attempt.reserved)} of {gang.min_count} "
        f"members of gang {gang.shown()} could be placed; {cause}"
    )
    by_uid = {d.pod.uid: d for d in attempt.failed}
    for pod in members:
        own = by_uid.get(pod.uid)
        if own is not None:
            outcome.failed.append(own)
        else:
            outcome.failed.append(
                Decision(
                    pod,
                    Status.of(Code.UNSCHEDULABLE, message, plugin="Coscheduling"),
                    snapshot.names,
                    CycleState(),
                )
            )


def classify(decision: Decision) -> tuple[str, str]:
    """(reason code, message) of a pod that did not get a node."""
    message = decision.summary()
    if decision.status.message().startswith(WAITING_FOR_GANG):
        return WAITING_FOR_GANG, decision.status.message()
    if decision.status.plugin == DOMAINS_PLUGIN:  # no domain of the level asked for holds it
        return TOPOLOGY_PLACEMENT_FAILED, f"{TOPOLOGY_PLACEMENT_FAILED}: {message}"
    if decision.filters:
        others = np.ones(len(decision.node_names), dtype=np.bool_)
        topology = np.zeros(len(decision.node_names), dtype=np.bool_)
        for plugin, verdicts in decision.filters:
            if plugin in TOPOLOGY_PLUGINS:
                topology |= ~verdicts.passed
            else:
                others &= verdicts.passed
        if (others & topology).any():
            return TOPOLOGY_PLACEMENT_FAILED, f"{TOPOLOGY_PLACEMENT_FAILED}: {message}"
    return NO_FIT, f"{NO_FIT}: {message}"
