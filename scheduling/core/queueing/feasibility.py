"""Could a pod ever run on the nodes a flavor selects? Admission must not reserve quota that no
node can use (a 4-GPU single-numa-node pod on nodes with 2 GPUs per NUMA node would hold its quota
forever while pods that fit wait for it).

The answer is the profile's own PreFilter and Filter phases run against the cluster emptied of
every pod: the same judgement of size, topology policy and scope, MIG profile, GPU model, node
selector and taints that placement applies, on each node's whole capacity. Cordoned and
quarantined nodes count as unable (nothing is placed there now); the cycle asks again every time,
so an uncordoned node makes the flavor admissible again. The flavor's node labels join the pod's
node selector and its tolerations the pod's tolerations, as they do once admitted. A pod set with
a topology request across nodes needs a flavor with a Topology one of whose domains could hold
the whole set (scheduling.core.domains on the empty capacity).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from types import MappingProxyType
from typing import Protocol

from scheduling.core.domains import DomainError, place
from scheduling.core.queueing.config import ResourceFlavor
from scheduling.core.queueing.pod_set_domains import node_rooms, pod_shape
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Status
from scheduling.core.types import NodeSpec, PodRequest


class Feasibility(Protocol):
    def blocker(self, pod: PodRequest, flavor: ResourceFlavor) -> str | None:
        """Why no node of `flavor` could ever host `pod`, or None when one could."""
        ...


class EmptyClusterFeasibility:
    """Feasibility judged on the nodes' empty capacity (module doc), answers kept per pod shape
    and flavor for the life of the object (build a new one when the nodes change)."""

    def __init__(
        self, framework: Framework, nodes: Sequence[NodeSpec], quarantined: Iterable[str] = ()
    ) -> None:
        self._framework = framework
        self._snapshot = ClusterSnapshot(nodes)
        for name in quarantined:
            if name in self._snapshot.index:
                self._snapshot.quarantine(name)
        self._answers: dict[tuple[object, ...], str | None] = {}

    def blocker(self, pod: PodRequest, flavor: ResourceFlavor) -> str | None:
        trial = replace(
            pod,
            uid="feasibility",
            gang=None,  # one member placed alone: whether the gang fits is placement's concern
            nominated_node="",
            node_selector=MappingProxyType({**pod.node_selector, **flavor.node_labels}),
            tolerations=(*pod.tolerations, *flavor.tolerations),
        )
        count = pod.gang.min_count if pod.gang is not None else 1
        key = (flavor.name, flavor.topology, pod.domain_ask, count, *_shape(trial))
        if key not in self._answers:
            decision, feasible = self._framework.filter_nodes(trial, self._snapshot)
            self._answers[key] = (
                self._domain_blocker(trial, flavor, count)
                if decision.status.is_success and len(feasible)
                else f"no node of flavor {flavor.name} can ever host {_describe(pod)}: "
                f"{decision.summary()}"
            )
        return self._answers[key]

    def _domain_blocker(self, pod: PodRequest, flavor: ResourceFlavor, count: int) -> str | None:
        """Why no domain of the flavor's Topology could ever hold the pod set its request asks
        for (Kueue admits a pod set with a topology request only to a flavor with a Topology)."""
        if pod.domain_ask is None:
            return None
        if flavor.topology is None:
            return f"flavor {flavor.name} names no Topology, and the pod set asks for one"
        try:
            request = pod.domain_ask.on(flavor.topology)
        except DomainError as exc:
            return f"flavor {flavor.name}: {exc}"
        rooms = node_rooms(self._framework, self._snapshot, pod)
        placed = place(request, rooms, pod_shape(pod), count)
        if isinstance(placed, Status):
            return f"on an empty cluster, {placed.message()}"
        return None


def _shape(pod: PodRequest) -> tuple[object, ...]:
    """What the filters read of a pod (its identity aside)."""
    return (
        pod.service_class,
        pod.cpu_milli,
        pod.memory_mib,
        pod.gpus,
        pod.gpu_milli,
        pod.mig_profile,
        pod.mig_count,
        pod.gpu_models,
        pod.topology_policy,
        pod.topology_scope,
        tuple(sorted(pod.node_selector.items())),
        pod.tolerations,
    )


def _describe(pod: PodRequest) -> str:
    if pod.mig_count:
        gpus = f"{pod.mig_count} x MIG {pod.mig_profile}"
    elif pod.gpu_milli:
        gpus = f"{pod.gpu_milli}m of a GPU"
    else:
        gpus = f"{pod.gpus} GPU{'s' if pod.gpus != 1 else ''}"
    policy = f", {pod.topology_policy.value}" if pod.topology_policy else ""
    scope = f" ({pod.topology_scope.value})" if pod.topology_scope else ""
    return f"a pod of {gpus}{policy}{scope}"
