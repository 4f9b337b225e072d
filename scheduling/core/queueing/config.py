"""Queue configuration as Kueue names it (wire-formats.md §6), from Kueue-shaped YAML documents:

    apiVersion: kueue.x-k8s.io/v1beta2
    kind: ResourceFlavor
    metadata: {name: h100}
    spec: {nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}}
    ---
    kind: ClusterQueue
    metadata: {name: vision}
    spec:
      cohortName: demo
      queueingStrategy: BestEffortFIFO          # or StrictFIFO
      fairSharing: {weight: 1}
      resourceGroups:
      - coveredResources: [nvidia.com/gpu]
        flavors:
        - name: h100
          resources: [{name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8, lendingLimit: 4}]
      preemption:
        withinClusterQueue: LowerPriority        # Never | LowerPriority | LowerOrNewerEqualPriority
        reclaimWithinCohort: Any                 # Never | LowerPriority | Any
        borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
    ---
    kind: LocalQueue
    metadata: {name: default, namespace: vision}
    spec: {clusterQueue: vision}
    ---
    apiVersion: kueue.x-k8s.io/v1beta2
    kind: WorkloadPriorityClass                  # or scheduling.k8s.io/v1 PriorityClass
    metadata: {name: online}
    value: 1000
    preemptionPolicy: PreemptLowerPriority       # or Never

Every key is checked: an unknown one is an error naming it and where it is, and Kueue features
gpusched does not implement (flavorFungibility, admissionChecks, ...) are refused rather than
silently ignored. `status` is ignored, so `kubectl get -o yaml` output can be applied. Resources a
cluster queue does not cover are not limited by it (GPU-centric: a queue listing only
`nvidia.com/gpu` does not meter CPU).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from scheduling.core.quantity import QuantityError
from scheduling.core.queueing.resources import CPU, GPU, MEMORY, parse_quantity
from scheduling.core.types import MIG_RESOURCE_PREFIX, Taint, TaintEffect, Toleration

KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
PRIORITY_VERSIONS = ("scheduling.k8s.io/v1",)
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")
_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})
E = TypeVar("E", bound=enum.StrEnum)


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


@dataclass(frozen=True, slots=True)
class ResourceFlavor:
    """A kind of node, here mostly a GPU model: pods admitted with this flavor get its node labels
    as node selector and its tolerations."""

    name: str
    node_labels: Mapping[str, str] = field(default_factory=lambda: _EMPTY_LABELS)
    node_taints: tuple[Taint, ...] = ()
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """Canonical units (resources.py). `None` limits: borrow without limit / lend everything."""

    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None

    @property
    def lendable(self) -> int:
        """What the cohort may use of this quota."""
        if self.lending_limit is None:
            return self.nominal
        return min(self.nominal, self.lending_limit)

    @property
    def guaranteed(self) -> int:
        """What stays reserved for the owner whatever the cohort does."""
        return self.nominal - self.lendable


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    name: str
    resources: Mapping[str, ResourceQuota]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True)
class Preemption:
    """Kueue's defaults: no preemption at all unless configured."""

    within_cluster_queue: WithinClusterQueue = WithinClusterQueue.NEVER
    reclaim_within_cohort: ReclaimWithinCohort = ReclaimWithinCohort.NEVER
    borrow_within_cohort: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER
    borrow_max_priority_threshold: int | None = None


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    cohort: str = ""
    resource_groups: tuple[ResourceGroup, ...] = ()
    queueing_strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO
    preemption: Preemption = field(default_factory=Preemption)
    weight: float = 1.0  # fairSharing.weight

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
        return [
            (fq.name, resource, quota)
            for group in self.resource_groups
            for fq in group.flavors
            for resource, quota in fq.resources.items()
        ]


@dataclass(frozen=True, slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    weight: float = 1.0  # fairSharing.weight: usage-aware ordering among a queue's tenants


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: PreemptionPolicy = PreemptionPolicy.PREEMPT_LOWER_PRIORITY
    description: str = ""
    global_default: bool = False


@dataclass(frozen=True)
class QueueConfig:
    flavors: tuple[ResourceFlavor, ...] = ()
    cluster_queues: tuple[ClusterQueue, ...] = ()
    local_queues: tuple[LocalQueue, ...] = ()
    priority_classes: tuple[PriorityClass, ...] = ()

    def check_references(self, known_flavors: frozenset[str] = frozenset()) -> None:
        """Every flavor a cluster queue names exists (here or in `known_flavors`), and so does
        every cluster queue a local queue points at (here only: callers add what they store)."""
        flavors = known_flavors | {f.name for f in self.flavors}
        for cq in self.cluster_queues:
            for group in cq.resource_groups:
                for fq in group.flavors:
                    if fq.name not in flavors:
                        raise QueueConfigError(
                            f"ClusterQueue {cq.name}: ResourceFlavor {fq.name!r} does not exist"
                        )


# --- parsing --------------------------------------------------------------------------------------


def parse_documents(docs: Sequence[object]) -> QueueConfig:
    """Kueue-shaped documents (already YAML-loaded) as one configuration. Empty documents (a
    trailing `---`) are skipped."""
    flavors: list[ResourceFlavor] = []
    cluster_queues: list[ClusterQueue] = []
    local_queues: list[LocalQueue] = []
    priority_classes: list[PriorityClass] = []
    seen: set[tuple[str, str]] = set()
    for k, doc in enumerate(docs):
        if doc is None:
            continue
        top = _mapping(doc, f"documents[{k}]")
        kind = top.get("kind")
        metadata = _mapping(top.get("metadata", {}), f"documents[{k}].metadata")
        where = f"documents[{k}] ({kind} {metadata.get('name', '?')})"
        parser = _PARSERS.get(str(kind))
        if parser is None:
            known = ", ".join(sorted(_PARSERS))
            raise QueueConfigError(f"documents[{k}]: unknown kind {kind!r} (known: {known})")
        parsed = parser(top, where)
        key_name = (
            f"{parsed.namespace}/{parsed.name}" if isinstance(parsed, LocalQueue) else parsed.name
        )
        key = (type(parsed).__name__, key_name)
        if key in seen:
            raise QueueConfigError(f"{where}: {key[0]} {key_name} is defined twice")
        seen.add(key)
        if isinstance(parsed, ResourceFlavor):
            flavors.append(parsed)
        elif isinstance(parsed, ClusterQueue):
            cluster_queues.append(parsed)
        elif isinstance(parsed, LocalQueue):
            local_queues.append(parsed)
        else:
            priority_classes.append(parsed)
    return QueueConfig(
        tuple(flavors), tuple(cluster_queues), tuple(local_queues), tuple(priority_classes)
    )


def _common(
    top: dict[str, Any],
    where: str,
    versions: tuple[str, ...],
    extra_top: frozenset[str] = frozenset(),
    *,
    namespaced: bool = False,
) -> tuple[str, str, dict[str, Any]]:
    allowed = {"apiVersion", "kind", "metadata", "spec", "status"} | extra_top
    _no_unknown(top, allowed, where)
    version = top.get("apiVersion")
    if version is not None and version not in versions:
        raise QueueConfigError(
            f"{where}: apiVersion {version!r} is not one of {', '.join(versions)}"
        )
    metadata = _mapping(top.get("metadata"), f"{where}.metadata")
    _no_unknown(metadata, {"name", "namespace", "labels", "annotations"}, f"{where}.metadata")
    name = _name(metadata.get("name"), f"{where}.metadata.name")
    namespace = ""
    if namespaced:
        namespace = _name(metadata.get("namespace"), f"{where}.metadata.namespace")
    elif "namespace" in metadata:
        raise QueueConfigError(f"{where}.metadata: unknown key 'namespace' (cluster-scoped)")
    spec = _mapping(top.get("spec", {}) or {}, f"{where}.spec")
    return name, namespace, spec


def _flavor(top: dict[str, Any], where: str) -> ResourceFlavor:
    name, _, spec = _common(top, where, KUEUE_VERSIONS)
    _no_unknown(spec, {"nodeLabels", "nodeTaints", "tolerations"}, f"{where}.spec")
    labels = _mapping(spec.get("nodeLabels", {}) or {}, f"{where}.spec.nodeLabels")
    taints = tuple(
        _taint(item, f"{where}.spec.nodeTaints[{k}]")
        for k, item in enumerate(
            _list(spec.get("nodeTaints", []) or [], f"{where}.spec.nodeTaints")
        )
    )
    tolerations = tuple(
        _toleration(item, f"{where}.spec.tolerations[{k}]")
        for k, item in enumerate(
            _list(spec.get("tolerations", []) or [], f"{where}.spec.tolerations")
        )
    )
    return ResourceFlavor(
        name,
        MappingProxyType({str(k): str(v) for k, v in labels.items()}),
        taints,
        tolerations,
    )


def _cluster_queue(top: dict[str, Any], where: str) -> ClusterQueue:
    name, _, spec = _common(top, where, KUEUE_VERSIONS)
    path = f"{where}.spec"
    unsupported = {
        "flavorFungibility",
        "admissionChecks",
        "admissionChecksStrategy",
        "admissionScope",
        "stopPolicy",
    }
    for key in sorted(unsupported & set(spec)):
        raise QueueConfigError(f"{path}: {key!r} is not supported by gpusched")
    _no_unknown(
        spec,
        {
            "cohort",
            "cohortName",
            "namespaceSelector",
            "queueingStrategy",
            "resourceGroups",
            "preemption",
            "fairSharing",
        },
        path,
    )
    if "cohort" in spec and "cohortName" in spec:
        raise QueueConfigError(f"{path}: give cohortName (v1beta2) or cohort (v1beta1), not both")
    cohort = str(spec.get("cohortName", spec.get("cohort", "")) or "")
    if cohort:
        _name(cohort, f"{path}.cohortName")
    selector = spec.get("namespaceSelector", {})
    if selector not in ({}, None):
        raise QueueConfigError(
            f"{path}.namespaceSelector: only {{}} (every namespace) is supported; "
            "LocalQueues decide which namespaces use the queue"
        )
    strategy = _enum(
        QueueingStrategy,
        spec.get("queueingStrategy", QueueingStrategy.BEST_EFFORT_FIFO.value),
        f"{path}.queueingStrategy",
    )
    groups = tuple(
        _resource_group(item, f"{path}.resourceGroups[{k}]", has_cohort=bool(cohort))
        for k, item in enumerate(_list(spec.get("resourceGroups", []), f"{path}.resourceGroups"))
    )
    covered: set[str] = set()
    flavor_names: set[str] = set()
    for k, group in enumerate(groups):
        again = sorted(covered & set(group.covered))
        if again:
            raise QueueConfigError(
                f"{path}.resourceGroups[{k}]: resource {again[0]!r} is covered by another group"
            )
        covered |= set(group.covered)
        for fq in group.flavors:
            if fq.name in flavor_names:
                raise QueueConfigError(
                    f"{path}.resourceGroups[{k}]: flavor {fq.name!r} is used by another group"
                )
            flavor_names.add(fq.name)
    fair = _mapping(spec.get("fairSharing", {}) or {}, f"{path}.fairSharing")
    _no_unknown(fair, {"weight"}, f"{path}.fairSharing")
    weight = _number(fair.get("weight", 1), f"{path}.fairSharing.weight")
    return ClusterQueue(
        name=name,
        cohort=cohort,
        resource_groups=groups,
        queueing_strategy=strategy,
        preemption=_preemption(spec.get("preemption", {}) or {}, f"{path}.preemption"),
        weight=weight,
    )


def _resource_group(raw: object, path: str, *, has_cohort: bool) -> ResourceGroup:
    doc = _mapping(raw, path)
    _no_unknown(doc, {"coveredResources", "flavors"}, path)
    covered = tuple(
        _resource_name(r, f"{path}.coveredResources[{k}]")
        for k, r in enumerate(_list(doc.get("coveredResources"), f"{path}.coveredResources"))
    )
    if not covered or len(set(covered)) != len(covered):
        raise QueueConfigError(f"{path}.coveredResources must list distinct resources")
    flavors = []
    for k, item in enumerate(_list(doc.get("flavors"), f"{path}.flavors")):
        fpath = f"{path}.flavors[{k}]"
        fdoc = _mapping(item, fpath)
        _no_unknown(fdoc, {"name", "resources"}, fpath)
        fname = _name(fdoc.get("name"), f"{fpath}.name")
        resources: dict[str, ResourceQuota] = {}
        for j, ritem in enumerate(_list(fdoc.get("resources"), f"{fpath}.resources")):
            rpath = f"{fpath}.resources[{j}]"
            rdoc = _mapping(ritem, rpath)
            _no_unknown(rdoc, {"name", "nominalQuota", "borrowingLimit", "lendingLimit"}, rpath)
            resource = _resource_name(rdoc.get("name"), f"{rpath}.name")
            if resource not in covered:
                raise QueueConfigError(f"{rpath}.name: {resource!r} is not in coveredResources")
            if resource in resources:
                raise QueueConfigError(f"{rpath}.name: {resource!r} is listed twice")
            if "nominalQuota" not in rdoc:
                raise QueueConfigError(f"{rpath}: nominalQuota is required")
            quota = ResourceQuota(
                _quantity(resource, rdoc["nominalQuota"], f"{rpath}.nominalQuota"),
                _optional_quantity(resource, rdoc.get("borrowingLimit"), f"{rpath}.borrowingLimit"),
                _optional_quantity(resource, rdoc.get("lendingLimit"), f"{rpath}.lendingLimit"),
            )
            if not has_cohort and (
                quota.borrowing_limit is not None or quota.lending_limit is not None
            ):
                raise QueueConfigError(
                    f"{rpath}: borrowingLimit and lendingLimit need a cohortName"
                )
            if quota.lending_limit is not None and quota.lending_limit > quota.nominal:
                raise QueueConfigError(f"{rpath}.lendingLimit must not exceed nominalQuota")
            resources[resource] = quota
        missing = [r for r in covered if r not in resources]
        if missing:
            raise QueueConfigError(
                f"{fpath}.resources: no quota for covered resource {missing[0]!r}"
            )
        flavors.append(FlavorQuotas(fname, MappingProxyType(resources)))
    if not flavors:
        raise QueueConfigError(f"{path}.flavors must list at least one flavor")
    return ResourceGroup(covered, tuple(flavors))


def _preemption(raw: object, path: str) -> Preemption:
    doc = _mapping(raw, path)
    _no_unknown(doc, {"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"}, path)
    borrow = _mapping(doc.get("borrowWithinCohort", {}) or {}, f"{path}.borrowWithinCohort")
    _no_unknown(borrow, {"policy", "maxPriorityThreshold"}, f"{path}.borrowWithinCohort")
    threshold = borrow.get("maxPriorityThreshold")
    if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool)):
        raise QueueConfigError(f"{path}.borrowWithinCohort.maxPriorityThreshold must be an integer")
    return Preemption(
        within_cluster_queue=_enum(
            WithinClusterQueue,
            doc.get("withinClusterQueue", "Never"),
            f"{path}.withinClusterQueue",
        ),
        reclaim_within_cohort=_enum(
            ReclaimWithinCohort,
            doc.get("reclaimWithinCohort", "Never"),
            f"{path}.reclaimWithinCohort",
        ),
        borrow_within_cohort=_enum(
            BorrowWithinCohortPolicy,
            borrow.get("policy", "Never"),
            f"{path}.borrowWithinCohort.policy",
        ),
        borrow_max_priority_threshold=threshold,
    )


def _local_queue(top: dict[str, Any], where: str) -> LocalQueue:
    name, namespace, spec = _common(top, where, KUEUE_VERSIONS, namespaced=True)
    _no_unknown(spec, {"clusterQueue", "fairSharing"}, f"{where}.spec")
    cluster_queue = _name(spec.get("clusterQueue"), f"{where}.spec.clusterQueue")
    fair = _mapping(spec.get("fairSharing", {}) or {}, f"{where}.spec.fairSharing")
    _no_unknown(fair, {"weight"}, f"{where}.spec.fairSharing")
    weight = _number(fair.get("weight", 1), f"{where}.spec.fairSharing.weight")
    return LocalQueue(namespace, name, cluster_queue, weight)


def _priority_class(top: dict[str, Any], where: str) -> PriorityClass:
    versions = PRIORITY_VERSIONS if top.get("kind") == "PriorityClass" else KUEUE_VERSIONS
    name, _, spec = _common(
        top,
        where,
        versions,
        frozenset({"value", "description", "preemptionPolicy", "globalDefault"}),
    )
    if spec:
        raise QueueConfigError(f"{where}: unknown key 'spec' (value is a top-level field)")
    value = top.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        raise QueueConfigError(f"{where}.value must be an integer, got {value!r}")
    default = top.get("globalDefault", False)
    if not isinstance(default, bool):
        raise QueueConfigError(f"{where}.globalDefault must be true or false")
    return PriorityClass(
        name=name,
        value=value,
        preemption_policy=_enum(
            PreemptionPolicy,
            top.get("preemptionPolicy", PreemptionPolicy.PREEMPT_LOWER_PRIORITY.value),
            f"{where}.preemptionPolicy",
        ),
        description=str(top.get("description", "") or ""),
        global_default=default,
    )


_PARSERS: dict[str, Any] = {
    "ResourceFlavor": _flavor,
    "ClusterQueue": _cluster_queue,
    "LocalQueue": _local_queue,
    "WorkloadPriorityClass": _priority_class,
    "PriorityClass": _priority_class,
}


def _taint(raw: object, path: str) -> Taint:
    doc = _mapping(raw, path)
    _no_unknown(doc, {"key", "value", "effect"}, path)
    effect = _enum(TaintEffect, doc.get("effect", "NoSchedule"), f"{path}.effect")
    return Taint(str(doc.get("key", "")), str(doc.get("value", "") or ""), effect)


def _toleration(raw: object, path: str) -> Toleration:
    doc = _mapping(raw, path)
    _no_unknown(doc, {"key", "operator", "value", "effect"}, path)
    operator = str(doc.get("operator", "Equal"))
    if operator not in ("Equal", "Exists"):
        raise QueueConfigError(f"{path}.operator must be Equal or Exists, got {operator!r}")
    effect = doc.get("effect")
    return Toleration(
        key=str(doc.get("key", "") or ""),
        operator=operator,
        value=str(doc.get("value", "") or ""),
        effect=_enum(TaintEffect, effect, f"{path}.effect") if effect else None,
    )


def _resource_name(value: object, path: str) -> str:
    if not isinstance(value, str) or not (
        value in (CPU, MEMORY, GPU) or value.startswith(MIG_RESOURCE_PREFIX)
    ):
        raise QueueConfigError(
            f"{path}: unknown resource {value!r} (known: cpu, memory, {GPU}, "
            f"{MIG_RESOURCE_PREFIX}<profile>)"
        )
    return value


def _quantity(resource: str, value: object, path: str) -> int:
    try:
        amount = parse_quantity(resource, value)
    except QuantityError as exc:
        raise QueueConfigError(f"{path}: {exc}") from exc
    if amount < 0:
        raise QueueConfigError(f"{path} must not be negative")
    return amount


def _optional_quantity(resource: str, value: object, path: str) -> int | None:
    return None if value is None else _quantity(resource, value, path)


def _number(value: object, path: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise QueueConfigError(f"{path} must be a number, got {value!r}") from None
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise QueueConfigError(f"{path} must be a non-negative number, got {value!r}")
    return float(value)


def _enum(kind: type[E], value: object, path: str) -> E:
    try:
        return kind(str(value))
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise QueueConfigError(f"{path}: {value!r} is not one of {known}") from None


def _name(value: object, path: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise QueueConfigError(f"{path} must be a DNS-1123 name, got {value!r}")
    return value


def _no_unknown(doc: Mapping[str, Any], allowed: set[str] | frozenset[str], path: str) -> None:
    unknown = sorted(set(doc) - set(allowed))
    if unknown:
        raise QueueConfigError(f"{path}: unknown key {unknown[0]!r}")


def _mapping(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise QueueConfigError(f"{path} must be a mapping")
    return value


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise QueueConfigError(f"{path} must be a list")
    return value
