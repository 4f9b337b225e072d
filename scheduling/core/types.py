"""Plain data the core works on: nodes and their GPUs, pod requests, placements. No I/O, no
Django.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from scheduling.core.domains import DomainAsk, Topology
from scheduling.core.topology import NodeTopology, uniform

MILLI_PER_GPU = 1000
GPU_RESOURCE = "nvidia.com/gpu"
GPU_MILLI_RESOURCE = "gpusched.io/gpu-milli"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"

_EMPTY: Mapping[str, str] = MappingProxyType({})
_NO_AMOUNTS: Mapping[str, int] = MappingProxyType({})


class ServiceClass(enum.StrEnum):
    ONLINE = "online"
    BATCH = "batch"
    OPPORTUNISTIC = "opportunistic"


class TopologyPolicy(enum.StrEnum):
    """Kubelet Topology Manager policy names; `restricted` and `single-numa-node` filter, the others
    only score."""

    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"


class TopologyScope(enum.StrEnum):
    """How tightly a GPU set must be connected, tightest first."""

    NVLINK = "nvlink"
    PCIE = "pcie"
    NUMA = "numa"
    NODE = "node"


class SharingMode(enum.StrEnum):
    EXCLUSIVE = "exclusive"
    TIME_SLICING = "time-slicing"
    MPS = "mps"
    MIG = "mig"

    @property
    def shareable(self) -> bool:
        return self in (SharingMode.TIME_SLICING, SharingMode.MPS)


class TaintEffect(enum.StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: TaintEffect = TaintEffect.NO_SCHEDULE

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # "Equal" | "Exists"
    value: str = ""
    effect: TaintEffect | None = None  # None tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect is not None and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return self.key in ("", taint.key)
        return self.key == taint.key and self.value == taint.value


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int
    model: str
    memory_mib: int = 0
    uuid: str = ""
    sharing: SharingMode = SharingMode.EXCLUSIVE
    mig_layout: tuple[
        str, ...
    ] = ()  # MIG instance profiles this GPU is partitioned into, e.g. ("3g.40gb", "1g.10gb")


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: tuple[GpuDevice, ...] = ()
    topology: NodeTopology | None = None
    labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    taints: tuple[Taint, ...] = ()
    cordoned: bool = False

    @property
    def gpu_model(self) -> str:
        return self.gpus[0].model if self.gpus else ""

    @property
    def shape(self) -> NodeTopology:
        """The topology the snapshot plans on: the known one, else one NUMA node, one switch."""
        return self.topology or uniform(len(self.gpus))

    def numa_cpu_shares(self) -> tuple[int, ...]:
        """Its CPU split over its NUMA nodes (what placements charge per NUMA node)."""
        return self.shape.numa_cpu_shares(self.cpu_milli)


@dataclass(frozen=True, slots=True)
class GangRef:
    """Membership of a pod in a pod set that must be placed all together (at least `min_count`
    members). `name` is the internal key that groups and orders the members; `label` what users
    read ("namespace/workload (pod set)"), never the key."""

    name: str
    min_count: int
    label: str = ""

    def shown(self) -> str:
        """The gang as messages name it."""
        return self.label or self.name


@dataclass(frozen=True, slots=True)
class Resources:
    """What one pod asks for, in the scheduler's units: milli-CPU, MiB, and exactly one GPU form
    (`gpus` whole GPUs, a `gpu_milli` share of one GPU, or `mig_count` MIG instances of
    `mig_profile`), plus extended resources counted against quota only (`example.com/credits`,
    `rdma/hca`, `ephemeral-storage`: whole canonical units, scheduling.core.queueing.resources).

    The one shape of a pod's resources. Each boundary converts it once each way: Kubernetes
    quantities (scheduling/core/resource_requests.py), the Pod row
    (scheduling/pod_resources.py), the core's PodRequest (`PodRequest.of`, `.resources`). A new
    resource is a field here and a line in each of those conversions."""

    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    mig_profile: str = ""
    mig_count: int = 0
    extended: Mapping[str, int] = field(default_factory=lambda: _NO_AMOUNTS)

    @property
    def empty(self) -> bool:
        """Asks for nothing the scheduler accounts."""
        return not (
            self.cpu_milli
            or self.memory_mib
            or self.gpus
            or self.gpu_milli
            or self.mig_count
            or any(self.extended.values())
        )


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What one pod asks for. Its resources are a Resources (`PodRequest.of(resources, uid)`,
    `request.resources`), kept as flat fields because the plugins read them on every node."""

    uid: str
    name: str = ""
    namespace: str = "default"
    tenant: str = ""
    priority: int = 0
    service_class: ServiceClass = ServiceClass.BATCH
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    mig_profile: str = ""
    mig_count: int = 0
    gpu_models: frozenset[str] = frozenset()
    topology_policy: TopologyPolicy | None = None  # None: named none (the profile's default holds)
    topology_scope: TopologyScope | None = None
    node_selector: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    tolerations: tuple[Toleration, ...] = ()
    gang: GangRef | None = None
    # The workload it belongs to ("tenant/name"): an eviction takes the whole workload.
    workload: str = ""
    created_at: float = 0.0
    can_preempt: bool = True  # its priority class's preemptionPolicy is not Never
    # The node a preemption emptied for it, while the victims there are still terminating: it
    # waits for them rather than preempting again (kube-scheduler's nominatedNodeName).
    nominated_node: str = ""
    # Share of a whole GPU this pod is expected to keep busy on each GPU it holds (what its tenant
    # really uses); None: as much as it asks for.
    load_estimate: float | None = None
    # Extended resources (`example.com/credits`, `rdma/hca`), whole units per pod: counted against
    # quota (scheduling.core.queueing.resources), not placed on nodes.
    extended: Mapping[str, int] = field(default_factory=lambda: _NO_AMOUNTS)
    # Its pod set's topology request across nodes, and its admitted flavor's Topology
    # (scheduling.core.domains): the batch places the whole pod set by them.
    domain_ask: DomainAsk | None = None
    domain_topology: Topology | None = None

    def __post_init__(self) -> None:
        forms = sum((self.gpus > 0, self.gpu_milli > 0, self.mig_count > 0))
        if forms > 1:
            raise ValueError(
                f"pod {self.uid}: ask for whole GPUs, a GPU share or MIG instances, not several"
            )
        if not 0 <= self.gpu_milli < MILLI_PER_GPU:
            raise ValueError(f"pod {self.uid}: gpu_milli must be in 1..999 (1000 is one whole GPU)")
        if self.mig_count and not self.mig_profile:
            raise ValueError(f"pod {self.uid}: mig_count needs mig_profile")
        if (
            min(self.cpu_milli, self.memory_mib, self.gpus, self.mig_count, *self.extended.values())
            < 0
        ):
            raise ValueError(f"pod {self.uid}: requests must not be negative")

    @classmethod
    def of(cls, resources: Resources, uid: str, **fields: Any) -> PodRequest:
        """A pod asking for `resources`; `fields` are the other PodRequest fields."""
        return cls(
            uid=uid,
            cpu_milli=resources.cpu_milli,
            memory_mib=resources.memory_mib,
            gpus=resources.gpus,
            gpu_milli=resources.gpu_milli,
            mig_profile=resources.mig_profile,
            mig_count=resources.mig_count,
            extended=MappingProxyType(dict(resources.extended)),
            **fields,
        )

    @property
    def resources(self) -> Resources:
        return Resources(
            self.cpu_milli,
            self.memory_mib,
            self.gpus,
            self.gpu_milli,
            self.mig_profile,
            self.mig_count,
            self.extended,
        )

    @property
    def wants_gpu(self) -> bool:
        return self.gpus > 0 or self.gpu_milli > 0 or self.mig_count > 0

    @property
    def gpu_demand_milli(self) -> int:
        """Whole-GPU and shared-GPU demand in milli-GPUs, as the FGD paper counts it (MIG slices are
        not counted)."""
        return self.gpus * MILLI_PER_GPU + self.gpu_milli

    @property
    def expected_load(self) -> float:
        """Busy share of one whole GPU expected on each GPU the pod holds."""
        if self.load_estimate is not None:
            return self.load_estimate
        return self.gpu_milli / MILLI_PER_GPU if self.gpu_milli else float(self.gpus > 0)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod goes: the node, the GPUs (with the milli taken on each) and any MIG instances."""

    node: str
    gpu_indices: tuple[int, ...] = ()
    milli_per_gpu: int = 0
    mig_slots: tuple[tuple[int, int], ...] = ()  # (gpu index, slot index in its mig_layout)
    numa_cpu_milli: tuple[int, ...] = ()  # CPU taken from each NUMA node of the node, in order
    scope: TopologyScope | None = None  # tightest scope the GPU set reached (multi-GPU pods)
    # An opportunistic share placed on capacity that is allocated to others but idle (reclaim):
    # it takes from the GPU's reclaimable milli, not its free milli, and is evicted when the
    # owners' use comes back.
    reclaimed: bool = False
