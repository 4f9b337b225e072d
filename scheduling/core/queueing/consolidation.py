"""Consolidation: when a gang's reservation cannot complete within its horizon (the predicted ends
of what its nodes hold lie too far ahead, scheduling.core.queueing.backfill), move movable work off
the fewest nodes so that the gang fits now, the idea of KAI scheduler's Consolidate action and of
Koordinator's descheduler. Moving is evicting: the shell carries the eviction out through the same
path as preemption (the database's services; on Kubernetes the Eviction API, which honours
PodDisruptionBudgets), and the moved work is requeued and placed again by the ordinary cycle.

What may move (`movable`): never an `online` pod; `batch` and `opportunistic` pods may, as
gpusched already treats them as restartable (preemption and reclaim evict and requeue them whole),
except a member of a gang or of a workload with other pods placed (moving it would move them all:
that is preemption, not consolidation). The caller narrows it further (`allowed`: the queue's
switch, and what may be evicted now: not terminating, not protected by a disruption budget).

As KAI's Consolidate does, a consolidation is only chosen when every pod it moves has somewhere
to go: the gang's members are placed on the nodes opened for them and each moved pod on another
node, all in the snapshot by the framework's own filters; otherwise nothing moves. The nodes
opened are those that need the fewest GPUs moved per member slot they give (so the fewest nodes
lose work), and on each the largest movable pods go first (the fewest pods). Pods already
terminating count as gone: a gang waiting for earlier victims moves nothing more.

Pure: the snapshot is left exactly as it was; the caller evicts and schedules the gang again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from scheduling.core.pod_index import HeldPod
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import BoolArray, ClusterSnapshot
from scheduling.core.types import PodRequest, ServiceClass

REASON = "Consolidated"


def movable(pod: PodRequest) -> bool:
    """Work consolidation may move: never online, never part of a gang."""
    return pod.service_class is not ServiceClass.ONLINE and pod.gang is None


def consolidation_victims(
    framework: Framework,
    snapshot: ClusterSnapshot,
    members: Sequence[PodRequest],
    allowed: Callable[[HeldPod], bool],
) -> list[HeldPod] | None:
    """The pods to move so that the gang's missing members fit, each of them placeable elsewhere
    (None: no such move; [] the gang fits once the pods already terminating are gone)."""
    gang = members[0].gang
    if gang is None:
        return None
    index = snapshot.pods
    missing = gang.min_count - index.gang_size(gang.name)
    todo = [pod for pod in members if pod.uid not in index][: max(0, missing)]
    if not todo:
        return None
    going = [index.held[uid] for uid in sorted(index.terminating) if uid in index]
    candidates = _movable_on_nodes(snapshot, allowed)
    per_pod = todo[0].gpus
    base = snapshot.reservation_blocked
    chosen = _open_nodes(snapshot, candidates, per_pod, len(todo), base)
    if chosen is None:
        return None
    nodes, victims = chosen
    assumed: list[Decision] = []
    forgotten = sorted([*going, *victims], key=lambda h: h.sequence)
    try:
        for held in forgotten:
            snapshot.forget(held.pod, held.placement)
        opened = np.zeros(len(snapshot), dtype=np.bool_)
        opened[nodes] = True
        if going and _all_placed(framework, snapshot, todo, base, assumed):
            return []  # what terminates frees enough: move nothing more
        _forget_all(framework, snapshot, assumed)
        if not victims:
            return None
        if not _all_placed(framework, snapshot, todo, base | ~opened, assumed):
            return None
        moved = sorted(victims, key=lambda h: (-h.pod.gpu_demand_milli, h.sequence))
        if not _all_placed(framework, snapshot, [h.pod for h in moved], base | opened, assumed):
            return None
        return sorted(victims, key=lambda h: h.sequence)
    finally:
        _forget_all(framework, snapshot, assumed)
        for held in forgotten:
            snapshot.assume(held.pod, held.placement)
            index.renumber(held.pod.uid, held.sequence)
        snapshot.reservation_blocked = base


def _movable_on_nodes(
    snapshot: ClusterSnapshot, allowed: Callable[[HeldPod], bool]
) -> list[list[HeldPod]]:
    """Per node, the pods that may move from it, largest first."""
    index = snapshot.pods
    out: list[list[HeldPod]] = []
    for held in index.on_node:
        pool = [
            h
            for h in held.values()
            if movable(h.pod)
            and index.evictable(h.pod.uid)
            and h.pod.wants_gpu
            and not (h.pod.workload and len(index.workloads.get(h.pod.workload, ())) > 1)
            and allowed(h)
        ]
        pool.sort(key=lambda h: (-h.pod.gpu_demand_milli, -h.sequence))
        out.append(pool)
    return out


def _open_nodes(
    snapshot: ClusterSnapshot,
    candidates: Sequence[Sequence[HeldPod]],
    per_pod: int,
    slots_needed: int,
    blocked: BoolArray,
) -> tuple[list[int], list[HeldPod]] | None:
    """By whole-GPU counts: the nodes to open (fewest GPUs moved per slot first) and the pods to
    move off them (largest first), or None when clearing every movable pod is not enough. The
    framework decides afterwards whether the pods really fit."""
    if per_pod <= 0:
        return None
    free = snapshot.full_free_count
    terminating = snapshot.pods.terminating
    options: list[tuple[float, int, int, int, list[HeldPod]]] = []
    for i, pool in enumerate(candidates):
        if blocked[i] or snapshot.gpu_count[i] < per_pod:
            continue
        have = int(free[i]) + sum(
            h.pod.gpus for h in snapshot.pods.on_node[i].values() if h.pod.uid in terminating
        )
        movable_gpus = sum(h.pod.gpus for h in pool)
        slots = min((have + movable_gpus) // per_pod, slots_needed)
        if slots <= 0:
            continue
        victims: list[HeldPod] = []
        short = slots * per_pod - have
        for held in pool:
            if short <= 0:
                break
            victims.append(held)
            short -= held.pod.gpus
        moved = sum(h.pod.gpus for h in victims)
        options.append((moved / slots, -slots, int(snapshot.tie_rank[i]), i, victims))
    options.sort(key=lambda o: o[:4])
    nodes: list[int] = []
    victims = []
    got = 0
    for _, negative_slots, _, i, pods in options:
        if got >= slots_needed:
            break
        nodes.append(i)
        victims.extend(pods)
        got += -negative_slots
    return (nodes, victims) if got >= slots_needed else None


def _all_placed(
    framework: Framework,
    snapshot: ClusterSnapshot,
    pods: Sequence[PodRequest],
    blocked: BoolArray,
    assumed: list[Decision],
) -> bool:
    """Place every pod (kept in `assumed`) with `blocked` nodes out of bounds."""
    snapshot.reservation_blocked = blocked
    for pod in pods:
        decision = framework.schedule_one(pod, snapshot)
        if decision.placement is None:
            return False
        assumed.append(decision)
    return True


def _forget_all(framework: Framework, snapshot: ClusterSnapshot, assumed: list[Decision]) -> None:
    for decision in reversed(assumed):
        framework.forget(decision, snapshot)
    assumed.clear()
