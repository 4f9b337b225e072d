"""Which pods a snapshot holds on which node (kube-scheduler's NodeInfo.Pods), kept by the
snapshot's assume/forget. Preemption looks for victims here, the gang plugin counts a gang's
reserved members here.

`sequence` grows with every assume, so a larger number is a more recently placed pod: the shell
loads held pods in the order they were bound, which makes it "most recently started" for victim
choice.

Some held pods cannot be victims: those already terminating (evicted, still holding what they
hold until they are gone) and those a disruption budget protects right now. The shell marks them
each cycle (`set_unevictable`); preemption and reclaim skip them.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from scheduling.core.types import Placement, PodRequest, ServiceClass


@dataclass(frozen=True, slots=True)
class HeldPod:
    pod: PodRequest
    placement: Placement
    node: int
    sequence: int


class PodIndex:
    def __init__(self, nodes: int) -> None:
        self.held: dict[str, HeldPod] = {}
        self.on_node: list[dict[str, HeldPod]] = [{} for _ in range(nodes)]
        self.gangs: dict[str, set[str]] = {}
        self.workloads: dict[str, set[str]] = {}
        self.terminating: frozenset[str] = frozenset()
        self.protected: frozenset[str] = frozenset()
        # (service class, priority) -> pods held: lets preemption tell at once that no pod in
        # the cluster could be a victim.
        self.classes: Counter[tuple[ServiceClass, int]] = Counter()
        self._sequence = 0

    def __len__(self) -> int:
        return len(self.held)

    def __contains__(self, uid: object) -> bool:
        return uid in self.held

    def add(self, node: int, pod: PodRequest, placement: Placement) -> None:
        if pod.uid in self.held:
            self.remove(pod)
        self._sequence += 1
        entry = HeldPod(pod, placement, node, self._sequence)
        self.held[pod.uid] = entry
        self.on_node[node][pod.uid] = entry
        if pod.gang is not None:
            self.gangs.setdefault(pod.gang.name, set()).add(pod.uid)
        if pod.workload:
            self.workloads.setdefault(pod.workload, set()).add(pod.uid)
        self.classes[(pod.service_class, pod.priority)] += 1

    def remove(self, pod: PodRequest) -> None:
        entry = self.held.pop(pod.uid, None)
        if entry is None:
            return
        self.on_node[entry.node].pop(pod.uid, None)
        if entry.pod.gang is not None:
            members = self.gangs.get(entry.pod.gang.name)
            if members is not None:
                members.discard(pod.uid)
                if not members:
                    del self.gangs[entry.pod.gang.name]
        if entry.pod.workload:
            pods = self.workloads.get(entry.pod.workload)
            if pods is not None:
                pods.discard(pod.uid)
                if not pods:
                    del self.workloads[entry.pod.workload]
        key = (entry.pod.service_class, entry.pod.priority)
        self.classes[key] -= 1
        if self.classes[key] <= 0:
            del self.classes[key]

    def renumber(self, uid: str, sequence: int) -> None:
        """Give a pod back its original place in time (a preemption check forgot and re-assumed
        it; it did not start again)."""
        entry = self.held.get(uid)
        if entry is not None:
            entry = HeldPod(entry.pod, entry.placement, entry.node, sequence)
            self.held[uid] = entry
            self.on_node[entry.node][uid] = entry

    def set_unevictable(self, *, terminating: frozenset[str], protected: frozenset[str]) -> None:
        self.terminating, self.protected = terminating, protected

    def evictable(self, uid: str) -> bool:
        return uid not in self.terminating and uid not in self.protected

    def workload_members(self, workload: str) -> list[HeldPod]:
        return [self.held[uid] for uid in self.workloads.get(workload, ())]

    def gang_size(self, name: str) -> int:
        return len(self.gangs.get(name, ()))

    def gang_members(self, name: str) -> list[HeldPod]:
        return [self.held[uid] for uid in self.gangs.get(name, ())]
