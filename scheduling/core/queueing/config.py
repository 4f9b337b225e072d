"""Queue configuration as Kueue names it (wire-formats.md §6): ResourceFlavor, ClusterQueue,
Cohort, LocalQueue, WorkloadPriorityClass / PriorityClass and the admission fair sharing part of
Kueue's Configuration, as the core reads them. Amounts are canonical (resources.py).

The objects are read from Kueue-shaped YAML documents or from the Kubernetes API by
`kueue_objects` (one reader for both); `compatibility` lists every Kueue field and what gpusched
does with it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduling.core.domains import Topology
from scheduling.core.types import Taint, Toleration

_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})
_EMPTY_WEIGHTS: Mapping[str, float] = MappingProxyType({})
NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by Kubernetes


class QueueConfigError(ValueError):
    """A queue document that cannot be used; the message names the offending key."""


class QueueingStrategy(enum.StrEnum):
    STRICT_FIFO = "StrictFIFO"  # the head blocks the queue until it is admitted
    BEST_EFFORT_FIFO = "BestEffortFIFO"  # an inadmissible head is skipped; the next one may go


class WithinClusterQueue(enum.StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    LOWER_OR_NEWER_EQUAL_PRIORITY = "LowerOrNewerEqualPriority"


class ReclaimWithinCohort(enum.StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"
    ANY = "Any"


class BorrowWithinCohortPolicy(enum.StrEnum):
    NEVER = "Never"
    LOWER_PRIORITY = "LowerPriority"


class PreemptionPolicy(enum.StrEnum):
    """A priority class's (Kubernetes PriorityClass.preemptionPolicy)."""

    PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
    NEVER = "Never"


class PriorityKind(enum.StrEnum):
    """Which object a priority class is: Kueue's (named by the `kueue.x-k8s.io/priority-class`
    label or a Workload's priorityClassRef) or Kubernetes' (a pod's priorityClassName)."""

    WORKLOAD = "WorkloadPriorityClass"
    POD = "PriorityClass"


class StopPolicy(enum.StrEnum):
    """A stopped queue admits nothing new; HoldAndDrain also evicts what it admitted."""

    NONE = "None"
    HOLD = "Hold"
    HOLD_AND_DRAIN = "HoldAndDrain"


class ConsolidationPolicy(enum.StrEnum):
    """gpusched's annotation gpusched.io/consolidation on a ClusterQueue: whether its workloads
    take part in consolidation (scheduling.core.queueing.consolidation). `Never`: its running
    work is never moved to make room, and its gangs never move others' work."""

    ALLOWED = "Allowed"
    NEVER = "Never"


class AdmissionMode(enum.StrEnum):
    """ClusterQueue.spec.admissionScope.admissionMode (admission fair sharing)."""

    USAGE_BASED = "UsageBasedAdmissionFairSharing"
    NONE = "NoAdmissionFairSharing"


class FungibilityPolicy(enum.StrEnum):
    """flavorFungibility.whenCanBorrow / whenCanPreempt."""

    MAY_STOP_SEARCH = "MayStopSearch"
    TRY_NEXT_FLAVOR = "TryNextFlavor"


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    """A kind of node, here mostly a GPU model: pods admitted with this flavor get its node labels
    as node selector and its tolerations."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY_LABELS)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    # Kueue's spec.topologyName: pod sets admitted with this flavor are placed by that
    # Topology's levels (scheduling.core.domains); "" when it has none. `topology` is the
    # Topology itself where the reader knows it (the stored queues).
    topology_name: str = ""
    topology: Topology | None = None


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Canonical units (resources.py). `None` limits: borrow without limit / lend everything."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


def flavor_resources(
    groups: tuple[ResourceGroup, ...],
) -> list[tuple[str, str, ResourceQuota]]:
    return [
        (fq.name, resource, quota)
        for group in groups
        for fq in group.flavors
        for resource, quota in fq.resources.items()
    ]


@dataclass(frozen=True, slots=True)
class Preemption:
    """Kueue's defaults: no preemption at all unless configured."""

    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    borrow_max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class NamespaceSelector:
    """A ClusterQueue's namespaceSelector, on the one label every namespace has
    (`kubernetes.io/metadata.name`): (operator, values) requirements, all of which must hold.
    No requirement: every namespace."""

    requirements: tuple[tuple[str, frozenset[str]], ...] = ()

    def admits(self, namespace: str) -> bool:
        for operator, values in self.requirements:
            if operator == "In" and namespace not in values:
                return False
            if operator == "NotIn" and namespace in values:
                return False
            if operator == "DoesNotExist":
                return False
        return True


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    cohort: str = ""
    resource_groups: tuple[ResourceGroup, ...] = ()
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: Preemption = field(default_factory=Preemption)
    weight: float = 1.0  # fairSharing.weight
    admission_mode: AdmissionMode = AdmissionMode.NONE
    stop_policy: StopPolicy = StopPolicy.NONE
    namespace_selector: NamespaceSelector = field(default_factory=NamespaceSelector)
    # flavorFungibility.whenCanBorrow: stop at the first flavor that fits by borrowing (Kueue's
    # default), or look for a later flavor that fits without.
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH
    # The annotation gpusched.io/default-runtime (a duration), seconds: the run time estimated
    # starts assume for its workloads before a similar one has finished (issue 37); None: none.
    default_runtime_s: float | None = None
    # The annotation gpusched.io/consolidation (issue 37): Never keeps the queue out of it.
    consolidation: ConsolidationPolicy = ConsolidationPolicy.ALLOWED

    @property
    def covered(self) -> frozenset[str]:
        return frozenset(r for group in self.resource_groups for r in group.covered)

    def quota(self, flavor: str, resource: str) -> ResourceQuota | None:
        for group in self.resource_groups:
            for flavor_quotas in group.flavors:
                if flavor_quotas.name == flavor:
                    return flavor_quotas.resources.get(resource)
        return None

    def flavor_resources(self) -> list[tuple[str, str, ResourceQuota]]:
        return flavor_resources(self.resource_groups)


@dataclass(frozen=True, slots=True)
class Cohort:
    """A node of a cohort tree (Kueue's v1beta2 Cohort): quota of its own shared by everything
    below it, limits on what its subtree borrows from / lends to its parent, a fair-sharing
    weight. A cohort a ClusterQueue names without a Cohort object is a root without quota."""

    name: str
    parent: str = ""
    resource_groups: tuple[ResourceGroup, ...] = ()
    weight: float = 1.0

    def flavor_resources(self) -> list[tuple[str, str, ResourceQuota]]:
        return flavor_resources(self.resource_groups)


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    weight: float = 1.0  # fairSharing.weight: usage-aware ordering among a queue's tenants
    stop_policy: StopPolicy = StopPolicy.NONE

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    description: str = ""
    global_default: bool = False
    kind: PriorityKind = PriorityKind.WORKLOAD


@dataclass(frozen=True, slots=True)
class AdmissionFairSharing:
    """Kueue's Configuration.admissionFairSharing. Without a Configuration document gpusched uses
    Kueue's sampling default (5m, apis/config/v1beta2/defaults.go) and the half-life of Kueue's
    documented example (168h, site/content/en/docs/concepts/admission_fair_sharing.md)."""

    usage_half_life_s: float = 168 * 3600.0
    usage_sampling_interval_s: float = 300.0
    resource_weights: Mapping[str, float] = field(default_factory=lambda: _EMPTY_WEIGHTS)


@dataclass(frozen=True)
class QueueConfig:
    flavors: tuple[ResourceFlavor, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    local_queues: tuple[LocalQueue, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()
    cohorts: tuple[Cohort, ...] = ()
    admission_fair_sharing: AdmissionFairSharing | None = None
    topologies: tuple[Topology, ...] = ()

    def check_references(
        self,
        known_flavors: frozenset[str] = frozenset(),
        known_parents: Mapping[str, str] | None = None,
        known_topologies: frozenset[str] = frozenset(),
    ) -> None:
        """Every flavor a cluster queue or cohort names exists (here or in `known_flavors`), every
        topology a flavor names exists (here or in `known_topologies`), and the cohorts (these
        plus `known_parents`: stored cohort -> parent) form trees."""
        topologies = known_topologies | {t.name for t in self.topologies}
        for flavor in self.flavors:
            if flavor.topology_name and flavor.topology_name not in topologies:
                raise QueueConfigError(
                    f"ResourceFlavor {flavor.name}: Topology {flavor.topology_name!r} does not "
                    "exist"
                )
        flavors = known_flavors | {f.name for f in self.flavors}
        owners = [(f"ClusterQueue {cq.name}", cq.resource_groups) for cq in self.cluster_queues]
        owners += [(f"Cohort {c.name}", c.resource_groups) for c in self.cohorts]
        for owner, groups in owners:
            for group in groups:
                for fq in group.flavors:
                    if fq.name not in flavors:
                        raise QueueConfigError(
                            f"{owner}: ResourceFlavor {fq.name!r} does not exist"
                        )
        parents = dict(known_parents or {})
        parents.update({c.name: c.parent for c in self.cohorts})
        cycle = cohort_cycle(parents)
        if cycle:
            raise QueueConfigError(
                "Cohort parentName makes a cycle: "
                + " -> ".join(cycle)
                + " (Kueue stops admitting in a cycle; gpusched refuses it)"
            )


def cohort_cycle(parents: Mapping[str, str]) -> list[str]:
    """The first cycle in cohort -> parent links, as a path ending where it starts ([] if none)."""
    done: set[str] = set()
    for start in sorted(parents):
        path: list[str] = []
        seen: set[str] = set()
        node = start
        while node and node not in done:
            if node in seen:
                return [*path[path.index(node) :], node]
            seen.add(node)
            path.append(node)
            node = parents.get(node, "")
        done |= seen
    return []


def cohort_path(cohort: str, parents: Mapping[str, str]) -> list[str]:
    """`cohort` and its ancestors, nearest first (parents must be acyclic)."""
    path: list[str] = []
    while cohort and cohort not in path:
        path.append(cohort)
        cohort = parents.get(cohort, "")
    return path
