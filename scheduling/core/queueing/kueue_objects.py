"""Kueue's objects -> the core's QueueConfig, one reader for both sources:

- `parse_documents`: Kueue-shaped YAML documents (`applyqueues`), for example

    apiVersion: kueue.x-k8s.io/v1beta2
    kind: ClusterQueue
    metadata: {name: vision, annotations: {gpusched.io/default-runtime: 45m}}   # gpusched's
    spec:
      cohortName: demo
      queueingStrategy: BestEffortFIFO          # or StrictFIFO
      fairSharing: {weight: 1}
      admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
      resourceGroups:
      - coveredResources: [nvidia.com/gpu, example.com/credits]
        flavors:
        - name: h100
          resources:
          - {name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8, lendingLimit: 4}
          - {name: example.com/credits, nominalQuota: 1k}
      preemption:
        withinClusterQueue: LowerPriority        # Never | LowerPriority | LowerOrNewerEqualPriority
        reclaimWithinCohort: Any                 # Never | LowerPriority | Any
        borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}

  with ResourceFlavor, Cohort, LocalQueue, WorkloadPriorityClass, scheduling.k8s.io/v1
  PriorityClass and Kueue's `Configuration` (its admissionFairSharing section) alike;
- `parse_cluster_objects`: the same objects as the Kubernetes API lists them (dicts, with the
  server's metadata and the defaults the API server fills in).

Every key is checked: an unknown one is an error naming it and where it is; a Kueue feature
gpusched does not act on is refused with its Kueue name and the reason (compatibility.py), never
accepted and ignored. `status` is observed state and not read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from scheduling.core.domains import Topology
from scheduling.core.queueing import compatibility, kueue_topology
from scheduling.core.queueing.config import (
    AdmissionFairSharing,
    AdmissionMode,
    BorrowWithinCohortPolicy,
    ClusterQueue,
    Cohort,
    FlavorQuotas,
    FungibilityPolicy,
    LocalQueue,
    Preemption,
    PreemptionPolicy,
    PriorityClass,
    PriorityKind,
    QueueConfig,
    QueueConfigError,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    WithinClusterQueue,
)
from scheduling.core.queueing.kueue_fields import (
    annotated,
    dns_name,
    duration,
    enum_value,
    list_of,
    mapping,
    namespace_selector,
    no_unknown,
    optional_quantity,
    quantity,
    resource_name,
    taint,
    toleration,
    weight,
)

KUEUE_VERSIONS = ("kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
PRIORITY_VERSIONS = ("scheduling.k8s.io/v1",)
CONFIG_VERSIONS = ("config.kueue.x-k8s.io/v1beta1", "config.kueue.x-k8s.io/v1beta2")
# ObjectMeta fields the API server sets: read past, never applied.
_METADATA = frozenset(
    {
        "name",
        "namespace",
        "labels",
        "annotations",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "finalizers",
        "ownerReferences",
        "selfLink",
        "generateName",
    }
)
_Queues = ResourceFlavor | ClusterQueue | Cohort | LocalQueue
Parsed = _Queues | PriorityClass | AdmissionFairSharing | Topology

MAX_FLAVORS_PER_GROUP = 16  # Kueue's ResourceGroup.flavors MaxItems (clusterqueue_types.go)


def parse_documents(docs: Sequence[object]) -> QueueConfig:
    """Kueue-shaped documents (already YAML-loaded) as one configuration. Empty documents (a
    trailing `---`) are skipped."""
    return _parse((f"documents[{k}]", doc) for k, doc in enumerate(docs))


def parse_cluster_objects(
    *,
    resource_flavors: Sequence[Mapping[str, Any]] = (),
    cluster_queues: Sequence[Mapping[str, Any]] = (),
    cohorts: Sequence[Mapping[str, Any]] = (),
    local_queues: Sequence[Mapping[str, Any]] = (),
    workload_priority_classes: Sequence[Mapping[str, Any]] = (),
    priority_classes: Sequence[Mapping[str, Any]] = (),
    configuration: Mapping[str, Any] | None = None,
    topologies: Sequence[Mapping[str, Any]] = (),
) -> QueueConfig:
    """The queue objects as the Kubernetes API lists them (`items` of each list, as dicts) as
    one configuration, read exactly as the same objects in YAML would be; `configuration`: Kueue's
    manager Configuration (the document in its ConfigMap), of which only admissionFairSharing
    may be given."""
    lists = (
        ("resourceflavors", "ResourceFlavor", resource_flavors),
        ("clusterqueues", "ClusterQueue", cluster_queues),
        ("cohorts", "Cohort", cohorts),
        ("localqueues", "LocalQueue", local_queues),
        ("workloadpriorityclasses", "WorkloadPriorityClass", workload_priority_classes),
        ("priorityclasses", "PriorityClass", priority_classes),
        ("topologies", "Topology", topologies),
    )

    def items() -> Iterable[tuple[str, object]]:
        for plural, kind, objects in lists:
            for k, item in enumerate(objects):
                where = f"{plural}[{k}]"
                doc = dict(mapping(item, where))
                if doc.setdefault("kind", kind) != kind:
                    raise QueueConfigError(f"{where}: kind {doc['kind']!r} in the {kind} list")
                yield where, doc
        if configuration is not None:
            yield "configuration", {"kind": "Configuration", **configuration}

    return _parse(items())


def _parse(docs: Iterable[tuple[str, object]]) -> QueueConfig:
    out: dict[type, list[Any]] = {kind: [] for kind in _KINDS}
    seen: set[tuple[str, str]] = set()
    for label, doc in docs:
        if doc is None:
            continue
        top = mapping(doc, label)
        kind = top.get("kind")
        if kind in compatibility.REFUSED_KINDS:
            raise QueueConfigError(
                f"{label}: Kueue's {kind} is not supported by gpusched: "
                + compatibility.REFUSED_KINDS[str(kind)]
            )
        parser = _PARSERS.get(str(kind))
        if parser is None:
            known = ", ".join(sorted(_PARSERS))
            raise QueueConfigError(f"{label}: unknown kind {kind!r} (known: {known})")
        metadata = top.get("metadata") or {}
        name = metadata.get("name", "?") if isinstance(metadata, dict) else "?"
        parsed = parser(top, f"{label} ({kind} {name})")
        key = _identity(parsed)
        if key in seen:
            raise QueueConfigError(f"{label}: {key[0]} {key[1]} is defined twice")
        seen.add(key)
        out[type(parsed)].append(parsed)
    fair_sharing = out[AdmissionFairSharing]
    return QueueConfig(
        flavors=tuple(out[ResourceFlavor]),
        cluster_queues=tuple(out[ClusterQueue]),
        local_queues=tuple(out[LocalQueue]),
        priority_classes=tuple(out[PriorityClass]),
        cohorts=tuple(out[Cohort]),
        admission_fair_sharing=fair_sharing[0] if fair_sharing else None,
        topologies=tuple(out[Topology]),
    )


def _identity(parsed: Parsed) -> tuple[str, str]:
    if isinstance(parsed, LocalQueue):
        return "LocalQueue", parsed.key
    if isinstance(parsed, PriorityClass):
        return parsed.kind.value, parsed.name
    if isinstance(parsed, AdmissionFairSharing):
        return "Configuration", "admissionFairSharing"
    return type(parsed).__name__, parsed.name


def _common(
    top: dict[str, Any],
    where: str,
    versions: tuple[str, ...],
    extra_top: frozenset[str] = frozenset(),
    *,
    namespaced: bool = False,
) -> tuple[str, str, dict[str, Any]]:
    allowed = {"apiVersion", "kind", "metadata", "spec", "status"} | extra_top
    no_unknown(top, allowed, where)
    _version(top, versions, where)
    metadata = mapping(top.get("metadata"), f"{where}.metadata")
    no_unknown(metadata, _METADATA, f"{where}.metadata")
    name = dns_name(metadata.get("name"), f"{where}.metadata.name")
    namespace = ""
    if namespaced:
        namespace = dns_name(metadata.get("namespace"), f"{where}.metadata.namespace")
    elif metadata.get("namespace"):
        raise QueueConfigError(f"{where}.metadata: unknown key 'namespace' (cluster-scoped)")
    spec = mapping(top.get("spec", {}) or {}, f"{where}.spec")
    return name, namespace, spec


def _version(top: Mapping[str, Any], versions: tuple[str, ...], where: str) -> None:
    version = top.get("apiVersion")
    if version is not None and version not in versions:
        raise QueueConfigError(
            f"{where}: apiVersion {version!r} is not one of {', '.join(versions)}"
        )


def _refuse_if_set(doc: Mapping[str, Any], key: str, kind: str, field_name: str, path: str) -> None:
    """A Kueue feature gpusched does not act on: refused when it asks for something (an empty
    value asks for nothing, as the API server's defaults often are)."""
    if doc.get(key) not in (None, {}, [], ""):
        raise QueueConfigError(compatibility.refusal(kind, field_name, f"{path}.{key}"))


def _flavor(top: dict[str, Any], where: str) -> ResourceFlavor:
    name, _, spec = _common(top, where, KUEUE_VERSIONS)
    path = f"{where}.spec"
    no_unknown(spec, {"nodeLabels", "nodeTaints", "tolerations", "topologyName"}, path)
    topology_name = str(spec.get("topologyName") or "")
    if topology_name:
        dns_name(topology_name, f"{path}.topologyName")
    labels = mapping(spec.get("nodeLabels", {}) or {}, f"{path}.nodeLabels")
    taints = tuple(
        taint(item, f"{path}.nodeTaints[{k}]")
        for k, item in enumerate(list_of(spec.get("nodeTaints", []) or [], f"{path}.nodeTaints"))
    )
    tolerations = tuple(
        toleration(item, f"{path}.tolerations[{k}]")
        for k, item in enumerate(list_of(spec.get("tolerations", []) or [], f"{path}.tolerations"))
    )
    return ResourceFlavor(
        name,
        MappingProxyType({str(k): str(v) for k, v in labels.items()}),
        taints,
        tolerations,
        topology_name,
    )


def _cluster_queue(top: dict[str, Any], where: str) -> ClusterQueue:
    name, _, spec = _common(top, where, KUEUE_VERSIONS)
    path = f"{where}.spec"
    for key in ("admissionChecksStrategy", "admissionChecks", "concurrentAdmissionPolicy"):
        _refuse_if_set(spec, key, "ClusterQueue", f"spec.{key}", path)
    no_unknown(
        spec,
        {
            "cohort",
            "cohortName",
            "namespaceSelector",
            "queueingStrategy",
            "resourceGroups",
            "preemption",
            "fairSharing",
            "flavorFungibility",
            "admissionScope",
            "stopPolicy",
            "admissionChecks",
            "admissionChecksStrategy",
            "concurrentAdmissionPolicy",
        },
        path,
    )
    if spec.get("cohort") and spec.get("cohortName"):
        raise QueueConfigError(f"{path}: give cohortName (v1beta2) or cohort (v1beta1), not both")
    cohort = str(spec.get("cohortName") or spec.get("cohort") or "")
    if cohort:
        dns_name(cohort, f"{path}.cohortName")
    strategy = enum_value(
        QueueingStrategy,
        spec.get("queueingStrategy") or QueueingStrategy.BEST_EFFORT_FIFO.value,
        f"{path}.queueingStrategy",
    )
    groups = _resource_groups(
        spec.get("resourceGroups"), path, has_parent=bool(cohort), lending_within_nominal=True
    )
    scope = mapping(spec.get("admissionScope", {}) or {}, f"{path}.admissionScope")
    no_unknown(scope, {"admissionMode"}, f"{path}.admissionScope")
    return ClusterQueue(
        name=name,
        cohort=cohort,
        resource_groups=groups,
        queueing_strategy=strategy,
        preemption=_preemption(spec.get("preemption", {}) or {}, f"{path}.preemption"),
        weight=weight(spec.get("fairSharing"), f"{path}.fairSharing"),
        admission_mode=enum_value(
            AdmissionMode,
            scope.get("admissionMode") or AdmissionMode.NONE.value,
            f"{path}.admissionScope.admissionMode",
        ),
        stop_policy=enum_value(
            StopPolicy, spec.get("stopPolicy") or StopPolicy.NONE.value, f"{path}.stopPolicy"
        ),
        namespace_selector=namespace_selector(
            spec.get("namespaceSelector"), f"{path}.namespaceSelector"
        ),
        when_can_borrow=_fungibility(spec.get("flavorFungibility"), f"{path}.flavorFungibility"),
        **annotated(top, where),  # gpusched's own: default run time, consolidation
    )


def _cohort(top: dict[str, Any], where: str) -> Cohort:
    name, _, spec = _common(top, where, KUEUE_VERSIONS)
    path = f"{where}.spec"
    no_unknown(spec, {"parentName", "resourceGroups", "fairSharing"}, path)
    parent = str(spec.get("parentName") or "")
    if parent:
        dns_name(parent, f"{path}.parentName")
        if parent == name:
            raise QueueConfigError(f"{path}.parentName: a Cohort cannot be its own parent")
    return Cohort(
        name=name,
        parent=parent,
        # A cohort may lend more than its own quota: what its members lend up (Kueue's Cohort
        # webhook does not hold lendingLimit to nominalQuota).
        resource_groups=_resource_groups(
            spec.get("resourceGroups"), path, has_parent=bool(parent), lending_within_nominal=False
        ),
        weight=weight(spec.get("fairSharing"), f"{path}.fairSharing"),
    )


def _resource_groups(
    raw: object, path: str, *, has_parent: bool, lending_within_nominal: bool
) -> tuple[ResourceGroup, ...]:
    groups = tuple(
        _resource_group(
            item,
            f"{path}.resourceGroups[{k}]",
            has_parent=has_parent,
            lending_within_nominal=lending_within_nominal,
        )
        for k, item in enumerate(list_of(raw or [], f"{path}.resourceGroups"))
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
    return groups


def _resource_group(
    raw: object, path: str, *, has_parent: bool, lending_within_nominal: bool
) -> ResourceGroup:
    doc = mapping(raw, path)
    no_unknown(doc, {"coveredResources", "flavors"}, path)
    covered = tuple(
        resource_name(r, f"{path}.coveredResources[{k}]")
        for k, r in enumerate(list_of(doc.get("coveredResources"), f"{path}.coveredResources"))
    )
    if not covered or len(set(covered)) != len(covered):
        raise QueueConfigError(f"{path}.coveredResources must list distinct resources")
    flavor_items = list_of(doc.get("flavors"), f"{path}.flavors")
    if (n := len(flavor_items)) > MAX_FLAVORS_PER_GROUP:
        raise QueueConfigError(f"{path}.flavors: {n} flavors, more than Kueue's 16 per group")
    flavors = []
    for k, item in enumerate(flavor_items):
        fpath = f"{path}.flavors[{k}]"
        fdoc = mapping(item, fpath)
        no_unknown(fdoc, {"name", "resources"}, fpath)
        fname = dns_name(fdoc.get("name"), f"{fpath}.name")
        resources: dict[str, ResourceQuota] = {}
        for j, ritem in enumerate(list_of(fdoc.get("resources"), f"{fpath}.resources")):
            rpath = f"{fpath}.resources[{j}]"
            rdoc = mapping(ritem, rpath)
            no_unknown(rdoc, {"name", "nominalQuota", "borrowingLimit", "lendingLimit"}, rpath)
            resource = resource_name(rdoc.get("name"), f"{rpath}.name")
            if resource not in covered:
                raise QueueConfigError(f"{rpath}.name: {resource!r} is not in coveredResources")
            if resource in resources:
                raise QueueConfigError(f"{rpath}.name: {resource!r} is listed twice")
            if "nominalQuota" not in rdoc:
                raise QueueConfigError(f"{rpath}: nominalQuota is required")
            quota = ResourceQuota(
                quantity(resource, rdoc["nominalQuota"], f"{rpath}.nominalQuota"),
                optional_quantity(resource, rdoc.get("borrowingLimit"), f"{rpath}.borrowingLimit"),
                optional_quantity(resource, rdoc.get("lendingLimit"), f"{rpath}.lendingLimit"),
            )
            if not has_parent and (
                quota.borrowing_limit is not None or quota.lending_limit is not None
            ):
                raise QueueConfigError(
                    f"{rpath}: borrowingLimit and lendingLimit need a cohortName (a parentName "
                    "for a Cohort)"
                )
            if (
                lending_within_nominal
                and quota.lending_limit is not None
                and quota.lending_limit > quota.nominal
            ):
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
    doc = mapping(raw, path)
    no_unknown(doc, {"withinClusterQueue", "reclaimWithinCohort", "borrowWithinCohort"}, path)
    borrow = mapping(doc.get("borrowWithinCohort", {}) or {}, f"{path}.borrowWithinCohort")
    no_unknown(borrow, {"policy", "maxPriorityThreshold"}, f"{path}.borrowWithinCohort")
    threshold = borrow.get("maxPriorityThreshold")
    if threshold is not None and (not isinstance(threshold, int) or isinstance(threshold, bool)):
        raise QueueConfigError(f"{path}.borrowWithinCohort.maxPriorityThreshold must be an integer")
    preemption = Preemption(
        within_cluster_queue=enum_value(
            WithinClusterQueue,
            doc.get("withinClusterQueue") or "Never",
            f"{path}.withinClusterQueue",
        ),
        reclaim_within_cohort=enum_value(
            ReclaimWithinCohort,
            doc.get("reclaimWithinCohort") or "Never",
            f"{path}.reclaimWithinCohort",
        ),
        borrow_within_cohort=enum_value(
            BorrowWithinCohortPolicy,
            borrow.get("policy") or "Never",
            f"{path}.borrowWithinCohort.policy",
        ),
        borrow_max_priority_threshold=threshold,
    )
    if (
        preemption.reclaim_within_cohort is ReclaimWithinCohort.NEVER
        and preemption.borrow_within_cohort is not BorrowWithinCohortPolicy.NEVER
    ):
        raise QueueConfigError(
            f"{path}: borrowWithinCohort needs reclaimWithinCohort other than Never "
            "(Kueue refuses reclaimWithinCohort=Never with borrowWithinCohort.policy!=Never)"
        )
    return preemption


def _fungibility(raw: object, path: str) -> FungibilityPolicy:
    doc = mapping(raw or {}, path)
    no_unknown(doc, {"whenCanBorrow", "whenCanPreempt", "preference"}, path)
    _refuse_if_set(doc, "preference", "ClusterQueue", "spec.flavorFungibility.preference", path)
    preempt = enum_value(
        FungibilityPolicy,
        doc.get("whenCanPreempt") or FungibilityPolicy.TRY_NEXT_FLAVOR.value,
        f"{path}.whenCanPreempt",
    )
    if preempt is FungibilityPolicy.MAY_STOP_SEARCH:
        raise QueueConfigError(
            compatibility.refusal(
                "ClusterQueue", "spec.flavorFungibility.whenCanPreempt", f"{path}.whenCanPreempt"
            )
        )
    return enum_value(
        FungibilityPolicy,
        doc.get("whenCanBorrow") or FungibilityPolicy.MAY_STOP_SEARCH.value,
        f"{path}.whenCanBorrow",
    )


def _local_queue(top: dict[str, Any], where: str) -> LocalQueue:
    name, namespace, spec = _common(top, where, KUEUE_VERSIONS, namespaced=True)
    path = f"{where}.spec"
    no_unknown(spec, {"clusterQueue", "fairSharing", "stopPolicy"}, path)
    return LocalQueue(
        namespace,
        name,
        dns_name(spec.get("clusterQueue"), f"{path}.clusterQueue"),
        weight(spec.get("fairSharing"), f"{path}.fairSharing"),
        enum_value(
            StopPolicy, spec.get("stopPolicy") or StopPolicy.NONE.value, f"{path}.stopPolicy"
        ),
    )


def _priority_class(top: dict[str, Any], where: str) -> PriorityClass:
    kind = PriorityKind(str(top.get("kind")))
    versions = PRIORITY_VERSIONS if kind is PriorityKind.POD else KUEUE_VERSIONS
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
        preemption_policy=enum_value(
            PreemptionPolicy,
            top.get("preemptionPolicy") or PreemptionPolicy.PREEMPT_LOWER_PRIORITY.value,
            f"{where}.preemptionPolicy",
        ),
        description=str(top.get("description", "") or ""),
        global_default=default,
        kind=kind,
    )


def _configuration(top: dict[str, Any], where: str) -> AdmissionFairSharing:
    """Kueue's manager Configuration: only its admissionFairSharing section is about queues."""
    _version(top, CONFIG_VERSIONS, where)
    for key in sorted(set(top) - {"apiVersion", "kind", "admissionFairSharing"}):
        raise QueueConfigError(
            f"{where}: Kueue's Configuration key {key!r} is not supported by gpusched: "
            + compatibility.reason("Configuration", "every other key")
        )
    path = f"{where}.admissionFairSharing"
    doc = mapping(top.get("admissionFairSharing") or {}, path)
    no_unknown(doc, {"usageHalfLifeTime", "usageSamplingInterval", "resourceWeights"}, path)
    defaults = AdmissionFairSharing()
    half_life = duration(doc.get("usageHalfLifeTime"), f"{path}.usageHalfLifeTime")
    sampling = duration(doc.get("usageSamplingInterval"), f"{path}.usageSamplingInterval")
    if sampling is not None and sampling <= 0:
        raise QueueConfigError(f"{path}.usageSamplingInterval must be greater than 0")
    weights = mapping(doc.get("resourceWeights") or {}, f"{path}.resourceWeights")
    resource_weights: dict[str, float] = {}
    for resource, value in weights.items():
        wpath = f"{path}.resourceWeights.{resource}"
        resource_name(resource, wpath)
        if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            raise QueueConfigError(f"{wpath} must be a non-negative number, got {value!r}")
        resource_weights[str(resource)] = float(value)
    return AdmissionFairSharing(
        usage_half_life_s=defaults.usage_half_life_s if half_life is None else half_life,
        usage_sampling_interval_s=(
            defaults.usage_sampling_interval_s if sampling is None else sampling
        ),
        resource_weights=MappingProxyType(resource_weights),
    )


_PARSERS: dict[str, Any] = {
    "ResourceFlavor": _flavor,
    "ClusterQueue": _cluster_queue,
    "Cohort": _cohort,
    "LocalQueue": _local_queue,
    "WorkloadPriorityClass": _priority_class,
    "PriorityClass": _priority_class,
    "Configuration": _configuration,
    "Topology": lambda top, where: kueue_topology.topology(
        *_common(top, where, kueue_topology.VERSIONS)[::2], f"{where}.spec"
    ),
}
_KINDS = (
    ResourceFlavor,
    ClusterQueue,
    Cohort,
    LocalQueue,
    PriorityClass,
    AdmissionFairSharing,
    Topology,
)
