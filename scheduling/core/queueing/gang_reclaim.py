"""Topology-aware reclaim for a gang: quota admitted it, but its pods do not fit on the nodes as
they are (the lent capacity is scattered over many nodes in small pieces). Find the fewest
evictable pods (the caller says which: typically pods of workloads borrowing from the gang's
cohort) whose eviction lets every member be placed, member by member: each member takes the node
where it needs the fewest victims, and is assumed there before the next member is considered.
Pure: the snapshot is left exactly as it was; the caller evicts and schedules the gang again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scheduling.core.plugins.preemption import DefaultPreemption
from scheduling.core.pod_index import HeldPod
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest


def gang_victims(
    framework: Framework,
    snapshot: ClusterSnapshot,
    members: Sequence[PodRequest],
    evictable: Callable[[HeldPod], bool],
) -> list[HeldPod] | None:
    finder = DefaultPreemption(1, 0)
    finder.use_filters(framework.filter)
    chosen: dict[str, HeldPod] = {}
    assumed: list[Decision] = []
    own = {pod.uid for pod in members}  # never a victim of its own gang
    try:
        for pod in members:
            decision = framework.schedule_one(pod, snapshot)
            if decision.placement is None:
                best: tuple[tuple[int, int, int], list[HeldPod]] | None = None
                for i, held in enumerate(snapshot.pods.on_node):
                    pool = [
                        h
                        for h in held.values()
                        if h.pod.uid not in own
                        and snapshot.pods.evictable(h.pod.uid)
                        and evictable(h)
                    ]
                    victims = finder.victims_on(pod, snapshot, i, pool)
                    if victims is None:
                        continue
                    cost = (
                        len(victims),
                        sum(h.pod.gpu_demand_milli for h in victims),
                        int(snapshot.tie_rank[i]),
                    )
                    if best is None or cost < best[0]:
                        best = (cost, victims)
                if best is None:
                    return None
                for victim in best[1]:
                    if victim.pod.uid in snapshot.pods:
                        snapshot.forget(victim.pod, victim.placement)
                    chosen[victim.pod.uid] = victim
                decision = framework.schedule_one(pod, snapshot)
                if decision.placement is None:
                    return None
            assumed.append(decision)
        return sorted(chosen.values(), key=lambda h: h.sequence)
    finally:
        for decision in reversed(assumed):
            framework.forget(decision, snapshot)
        for victim in sorted(chosen.values(), key=lambda h: h.sequence):
            snapshot.assume(victim.pod, victim.placement)
            snapshot.pods.renumber(victim.pod.uid, victim.sequence)
