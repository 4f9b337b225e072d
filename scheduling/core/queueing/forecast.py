"""Estimated starts by simulation (issue 18): the queue replayed forward with the real core, on a
copy of the snapshot, against predicted ends.

Nothing is pooled: at each replay step what is predicted to have ended is forgotten in the copy,
the admission cycle runs over the cluster queues (quota, flavors, cohorts, fair sharing) and the
admitted pods are scheduled by the framework in queue order with gangs all or nothing and with
reservations and backfill (scheduling.core.queueing.batch): so nodes, GPU topology, flavors,
selectors and cordons all count, as they do for real. A workload's estimated start is the first
step at which all its pods are placed; a started workload ends after its predicted run time.

Run it twice, once with p50 and once with p90 predictions, for an interval.

Bounded cost: a step is the next predicted end, but at least `min_step_s` and `growth - 1` times
the time since now after the previous one (a geometric grid: the number of steps grows with the
log of the horizon); what starts in a step is dated at the latest predicted end the step took in
(the change that let it start happened then, not at the grid point, and a chain of starts does
not accumulate the grid's rounding: dating at the grid point made estimates late); at most
`batch_size` pods beyond what the free GPUs could hold are tried per step; the replay stops
after `horizon_s`. What has not started by then is "unknown", with the reason: beyond the
horizon, or waiting for work with no predicted end.
Quota preemption in the replay evicts its victims without requeueing them.
"""

from __future__ import annotations

import copy
import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.admission import QueuedWorkload, admission_cycle
from scheduling.core.queueing.backfill import BackfillPolicy
from scheduling.core.queueing.batch import schedule_batch
from scheduling.core.queueing.config import ClusterQueue, Cohort, LocalQueue, ResourceFlavor
from scheduling.core.queueing.fair_usage import FairUsageState
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest

BEYOND_HORIZON = "not started within the forecast's {hours:g} h"
NO_PREDICTED_END = "waits for running work with no predicted end"
NEVER_FITS = "no step of the forecast could place it"


@dataclass(frozen=True)
class Queues:
    """The admission cycle's inputs (None in Forecast: every workload is admitted already)."""

    cluster_queues: Sequence[ClusterQueue]
    flavors: Mapping[str, ResourceFlavor]
    local_queues: Sequence[LocalQueue] = ()
    cohorts: Sequence[Cohort] = ()
    fair_usage: FairUsageState | None = None
    starving_after_s: float | None = None  # admission_cycle's starvation bound, as the cycle's


@dataclass(frozen=True)
class WaitingWork:
    key: str
    pods: tuple[PodRequest, ...]  # what is left to place, in queue order
    queued: QueuedWorkload | None  # waiting for quota; None: admitted already
    runtime_s: float | None  # predicted run time once started (None: runs indefinitely)


@dataclass
class Forecast:
    framework: Framework
    snapshot: ClusterSnapshot  # copied, never changed
    now: float
    held_ends: Mapping[str, float | None]  # predicted end of each held pod, by uid
    admitted: Sequence[AdmittedWorkload]  # what holds quota now
    waiting: Sequence[WaitingWork]  # in queue order
    queues: Queues | None = None
    owners: Mapping[str, str] | None = None  # held pod uid -> workload key (default: its own)
    min_step_s: float = 60.0
    growth: float = 1.2
    # No step is longer than this: a long step takes in the ends of many jobs at once and dates
    # every start in it at the latest of them, so a deep queue of short jobs drained at the pace
    # of its longest ones and its estimates were late (docs/benchmarks.md, issue 18, fourth
    # pass). None: the grid grows without bound.
    max_step_s: float | None = 1800.0
    horizon_s: float = 2 * 86400.0
    batch_size: int = 128
    # The batch's reservations in the replay: a policy for the step's time and predicted ends.
    backfill: Callable[[float, Callable[[HeldPod], float | None]], BackfillPolicy] | None = None

    def run(self) -> dict[str, float | str]:
        """Per waiting key: the estimated start, or why it is unknown."""
        snapshot = _copy(self.snapshot)
        ends: dict[str, float | None] = {uid: self.held_ends.get(uid) for uid in snapshot.pods.held}
        owners = self.owners or {}
        owner_of = {
            uid: owners.get(uid) or h.pod.workload or uid for uid, h in snapshot.pods.held.items()
        }
        pending = {w.key: w.queued for w in self.waiting if w.queued is not None}
        admitted = {a.key: a for a in self.admitted}
        unplaced = [w for w in self.waiting if w.queued is None]
        by_key = {w.key: w for w in self.waiting}
        heap = [(end, uid) for uid, end in ends.items() if end is not None]
        heapq.heapify(heap)
        out: dict[str, float | str] = {}

        def end_of(held: HeldPod) -> float | None:
            return ends.get(held.pod.uid)

        at = self.now
        # When the step's changes happened: its latest predicted end (<= at). What starts in
        # the step starts then, not at the grid point, so that the grid's rounding neither
        # delays an estimate nor compounds along a chain of starts.
        happened = self.now
        reason = NEVER_FITS
        while True:
            while heap and heap[0][0] <= at:  # 1. predicted ends
                end_at, uid = heapq.heappop(heap)
                happened = max(happened, end_at)
                held = snapshot.pods.held.get(uid)
                if held is not None:
                    snapshot.forget(held.pod, held.placement)
                    admitted.pop(owner_of.get(uid, uid), None)
            if pending and self.queues is not None:  # 2. admission
                q = self.queues
                result = admission_cycle(
                    q.cluster_queues,
                    q.flavors,
                    list(pending.values()),
                    list(admitted.values()),
                    local_queues=q.local_queues,
                    cohorts=q.cohorts,
                    fair_usage=q.fair_usage,
                    now=at,
                    starving_after_s=q.starving_after_s,
                )
                for a in result.admitted:
                    for victim in a.victims:
                        admitted.pop(victim, None)
                        for held in snapshot.pods.workload_members(victim):
                            snapshot.forget(held.pod, held.placement)
                    work = by_key[a.workload.key]
                    del pending[a.workload.key]
                    admitted[work.key] = AdmittedWorkload(
                        work.key,
                        a.workload.cluster_queue,
                        created_at=a.workload.created_at,
                        admitted_at=at,
                        usage=a.assignment.usage,
                        local_queue=a.workload.local_queue,
                    )
                    unplaced.append(work)
            elif pending:
                unplaced += [by_key[key] for key in pending]
                pending.clear()
            if unplaced and _may_place(snapshot, unplaced):  # 3. placement
                pods = self._batch(snapshot, unplaced)
                policy = self.backfill(at, end_of) if self.backfill is not None else None
                outcome = schedule_batch(self.framework, snapshot, pods, backfill=policy)
                placed = {d.pod.uid for d in outcome.placed}
                placed |= {d.pod.uid for g in outcome.gangs for d in g}
                still: list[WaitingWork] = []
                for work in unplaced:
                    left = tuple(p for p in work.pods if p.uid not in placed)
                    if left:
                        still.append(WaitingWork(work.key, left, None, work.runtime_s))
                        continue
                    out[work.key] = happened
                    end = None if work.runtime_s is None else happened + work.runtime_s
                    for pod in work.pods:
                        ends[pod.uid] = end
                        owner_of[pod.uid] = work.key
                        if end is not None:
                            heapq.heappush(heap, (end, pod.uid))
                unplaced = still
                by_key.update({w.key: w for w in still})
            if not unplaced and not pending:
                break
            if not heap:
                reason = NO_PREDICTED_END
                break
            # The next predicted end, but no sooner than the grid allows (the ends in between
            # are taken in together).
            step = max(self.min_step_s, (at - self.now) * (self.growth - 1))
            if self.max_step_s is not None:
                step = min(step, self.max_step_s)
            at = max(heap[0][0], at + step)
            if at - self.now > self.horizon_s:
                reason = BEYOND_HORIZON.format(hours=self.horizon_s / 3600)
                break
        for work in self.waiting:
            out.setdefault(work.key, reason)
        return out

    def _batch(
        self, snapshot: ClusterSnapshot, unplaced: Sequence[WaitingWork]
    ) -> list[PodRequest]:
        """The pods tried in a step, whole workloads in queue order: those the free GPUs could
        hold, and up to `batch_size` pods of those that could not (a head that does not fit
        must not stop what fits behind it). Free GPUs, not a fixed count, bound the batch: a
        fixed count capped how fast the replay could drain a long queue of small jobs, and
        made their estimates late."""
        room = int(snapshot.full_free_count.sum())
        extra = 0
        out: list[PodRequest] = []
        for work in unplaced:
            need = sum(pod.gpus for pod in work.pods)
            if 0 < need <= room:
                room -= need
            else:
                extra += len(work.pods)
                if extra > self.batch_size:
                    break
            out.extend(work.pods)
        return out


def _may_place(snapshot: ClusterSnapshot, unplaced: Sequence[WaitingWork]) -> bool:
    """False only when every pod wants whole GPUs and no GPU is free (trying would be wasted)."""
    if int(snapshot.full_free_count.sum()) > 0:
        return True
    return any(not pod.gpus for work in unplaced for pod in work.pods)


def _copy(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """A copy to replay on: what assume/forget change is copied, what they never change (nodes,
    GPU set choosers, pods and placements, which are frozen) is shared."""
    memo: dict[int, object] = {
        id(snapshot.nodes): snapshot.nodes,
        id(snapshot.names): snapshot.names,
    }
    shared: list[object] = [*snapshot.nodes, *snapshot.choosers, snapshot._mask_cache]
    for held in snapshot.pods.held.values():
        shared += [held.pod, held.placement]
    memo.update({id(x): x for x in shared})
    return copy.deepcopy(snapshot, memo)
