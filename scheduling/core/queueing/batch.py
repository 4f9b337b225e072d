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
victims, and the caller's `preempt` hook evicts them (and forgets them from the snapshot) and
returns a new attempt, or None to leave the pod waiting.

`classify` turns a failed decision into a pending reason: WaitingForGang, TopologyPlacementFailed
(some node has the resources but not the GPU topology asked for), or NoFit with the per-plugin
node reasons summarized.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.queueing.admission import (
    NO_FIT,
    TOPOLOGY_PLACEMENT_FAILED,
    WAITING_FOR_GANG,
)
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import PodRequest

PreemptHook = Callable[[Decision], Decision | None]
# Called with a gang that could not be placed: may evict pods (forgetting them from the snapshot)
# and return True to have the gang tried once more.
GangReclaimHook = Callable[[Sequence[PodRequest]], bool]
TOPOLOGY_PLUGINS = frozenset({"GPUTopology", "GPUTopologyAware"})


@dataclass
class BatchOutcome:
    placed: list[Decision] = field(default_factory=list)  # single pods, each bound on its own
    gangs: list[list[Decision]] = field(default_factory=list)  # each bound in one transaction
    failed: list[Decision] = field(default_factory=list)
    preemptions: int = 0

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
    preempt: PreemptHook | None = None,
    reclaim_gang: GangReclaimHook | None = None,
) -> BatchOutcome:
    outcome = BatchOutcome()
    ordered = gang_order(pods)
    k = 0
    while k < len(ordered):
        pod = ordered[k]
        if pod.gang is None:
            decision = framework.schedule_one(pod, snapshot)
            if decision.placement is None and decision.nomination is not None and preempt:
                retried = preempt(decision)
                if retried is not None:
                    outcome.preemptions += 1
                    decision = retried
            (outcome.placed if decision.placement is not None else outcome.failed).append(decision)
            k += 1
            continue
        name = pod.gang.name
        end = k
        while (
            end < len(ordered)
            and ordered[end].gang is not None
            and (
                ordered[end].gang.name == name  # type: ignore[union-attr]
            )
        ):
            end += 1
        members = ordered[k:end]
        attempt = _try_gang(framework, snapshot, members)
        if not attempt.complete and reclaim_gang is not None and reclaim_gang(members):
            outcome.preemptions += 1
            attempt = _try_gang(framework, snapshot, members)
        _settle_gang(snapshot, members, attempt, outcome)
        k = end
    return outcome


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
        f"members of gang {gang.name} could be placed; {cause}"
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
