"""Every resource the simulated API server serves, in one table: adding a kind is one line.

A row names the group, the served versions (the first is the one objects are stored in), the
plural of the URL, the kind, whether it lives in a namespace, its subresources, and the few
facts that differ between kinds in the real API server: the field selectors it supports beyond
`metadata.name` / `metadata.namespace`, whether `metadata.generation` tracks spec changes, whether
a create keeps the status it is sent (nodes and namespaces do; everything with a status
subresource else starts with an empty one), and whether a delete answers with the object or with
a Status. Custom resources (the CRD-backed kinds: pod groups, Kueue, NodeResourceTopology) do
not accept strategic merge patches, as the API server refuses them for CRDs.

A row may be another version of a stored resource (`stored_as`): core/v1 events are the
events.k8s.io/v1 events in another shape, as both are one storage in the API server. Its objects
are converted on the way in and out (sim/kubernetes/kinds/events.py), and its field selectors
read the stored object's paths (`field_paths`).

Shapes are those of the Kubernetes API reference (kubernetes.io/docs/reference/kubernetes-api/),
the scheduler-plugins and Volcano CRDs, Kueue's v1beta2 API reference and the NFD
NodeResourceTopology API; docs/kubernetes.md cites each.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

KUEUE_VERSIONS = ("v1beta2", "v1beta1")
ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


@dataclass(frozen=True)
class Resource:
    group: str  # "" for the core group
    versions: tuple[str, ...]
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()
    short_names: tuple[str, ...] = ()
    field_selectors: tuple[str, ...] = ()
    tracks_generation: bool = True
    status_on_create: bool = False
    returns_deleted_object: bool = False
    custom: bool = False  # served by a CRD in a real cluster
    stored_as: str = ""  # the key of the resource whose objects these are, in another shape
    field_paths: tuple[tuple[str, str], ...] = ()  # field selector -> path in the stored object

    @property
    def key(self) -> str:
        return f"{self.group}/{self.plural}"

    @property
    def storage_key(self) -> str:
        return self.stored_as or self.key

    def field_path(self, selector: str) -> str:
        return dict(self.field_paths).get(selector, selector)

    @property
    def storage_version(self) -> str:
        return self.versions[0]

    def api_version(self, version: str | None = None) -> str:
        version = version or self.storage_version
        return f"{self.group}/{version}" if self.group else version

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @cached_property
    def qualified(self) -> str:
        """How error messages name it: `pods`, `leases.coordination.k8s.io`."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @cached_property
    def qualified_kind(self) -> str:
        """How `Invalid` messages name it: `Pod`, `Lease.coordination.k8s.io`."""
        return f"{self.kind}.{self.group}" if self.group else self.kind

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources


POD_FIELDS = (
    "spec.nodeName",
    "spec.schedulerName",
    "spec.restartPolicy",
    "spec.serviceAccountName",
    "status.phase",
    "status.nominatedNodeName",
)
# pkg/apis/events/v1/conversion.go and pkg/apis/core/v1/conversion.go (the field labels each
# version accepts), over the one field set of pkg/registry/core/event/strategy.go.
EVENT_FIELDS = (
    "regarding.kind",
    "regarding.name",
    "regarding.namespace",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reason",
    "reportingController",
    "type",
)
CORE_EVENT_PATHS = (
    *((f"involvedObject.{f}", f"regarding.{f}")
      for f in ("kind", "name", "namespace", "uid", "apiVersion", "resourceVersion", "fieldPath")),
    ("reason", "reason"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource.component"),
    ("type", "type"),
)  # fmt: skip

R = Resource
TABLE: tuple[Resource, ...] = (
    # core/v1
    R("", ("v1",), "namespaces", "Namespace", False, ("status",), ("ns",), ("status.phase",),
      tracks_generation=False, status_on_create=True, returns_deleted_object=True),
    R("", ("v1",), "nodes", "Node", False, ("status",), ("no",), ("spec.unschedulable",),
      tracks_generation=False, status_on_create=True),
    R("", ("v1",), "pods", "Pod", True, ("status", "binding", "eviction"), ("po",), POD_FIELDS,
      returns_deleted_object=True),
    R("", ("v1",), "configmaps", "ConfigMap", True, (), ("cm",), tracks_generation=False),
    R("", ("v1",), "events", "Event", True, (), ("ev",), tuple(p for p, _ in CORE_EVENT_PATHS),
      tracks_generation=False, stored_as="events.k8s.io/events", field_paths=CORE_EVENT_PATHS),
    # events.k8s.io, coordination, policy, scheduling
    R("events.k8s.io", ("v1",), "events", "Event", True, (), ("ev",), EVENT_FIELDS,
      tracks_generation=False),
    R("coordination.k8s.io", ("v1",), "leases", "Lease", True, tracks_generation=False),
    R("batch", ("v1",), "jobs", "Job", True, ("status",), (), ("status.successful",),
      field_paths=(("status.successful", "status.succeeded"),)),
    R("policy", ("v1",), "poddisruptionbudgets", "PodDisruptionBudget", True, ("status",),
      ("pdb",)),
    R("scheduling.k8s.io", ("v1",), "priorityclasses", "PriorityClass", False, (), ("pc",),
      tracks_generation=False),
    # The Kubernetes PodGroup API of workload-aware scheduling (KEP-4671): beta in 1.37, the
    # pinned client's version; v1alpha2 is 1.36's.
    R("scheduling.k8s.io", ("v1beta1", "v1alpha2"), "podgroups", "PodGroup", True, ("status",)),
    R("scheduling.k8s.io", ("v1beta1", "v1alpha2"), "workloads", "Workload", True),
    # Dynamic Resource Allocation (resource.k8s.io/v1, GA since 1.34)
    R("resource.k8s.io", ("v1",), "deviceclasses", "DeviceClass", False),
    R("resource.k8s.io", ("v1",), "resourceslices", "ResourceSlice", False, (), (),
      ("spec.nodeName", "spec.driver")),
    R("resource.k8s.io", ("v1",), "resourceclaims", "ResourceClaim", True, ("status",)),
    R("resource.k8s.io", ("v1",), "resourceclaimtemplates", "ResourceClaimTemplate", True),
    # Gang schedulers' pod groups, Kueue's queue objects, NFD's NodeResourceTopology (CRDs)
    R("scheduling.x-k8s.io", ("v1alpha1",), "podgroups", "PodGroup", True, ("status",),
      ("pg", "pgs"), returns_deleted_object=True, custom=True),
    R("scheduling.volcano.sh", ("v1beta1",), "podgroups", "PodGroup", True, ("status",),
      ("pg", "podgroup-v1beta1"), returns_deleted_object=True, custom=True),
    R("scheduling.volcano.sh", ("v1beta1",), "queues", "Queue", False, ("status",), ("q",),
      returns_deleted_object=True, custom=True),
    # Kueue: v1beta2 since 0.15, v1beta1 before (and still served beside it).
    R("kueue.x-k8s.io", KUEUE_VERSIONS, "resourceflavors", "ResourceFlavor", False, (), ("rf",),
      returns_deleted_object=True, custom=True),
    R("kueue.x-k8s.io", KUEUE_VERSIONS, "clusterqueues", "ClusterQueue", False, ("status",),
      ("cq",), returns_deleted_object=True, custom=True),
    R("kueue.x-k8s.io", KUEUE_VERSIONS, "localqueues", "LocalQueue", True, ("status",), ("lq",),
      returns_deleted_object=True, custom=True),
    R("kueue.x-k8s.io", KUEUE_VERSIONS, "cohorts", "Cohort", False, ("status",),
      returns_deleted_object=True, custom=True),
    R("kueue.x-k8s.io", KUEUE_VERSIONS, "workloadpriorityclasses", "WorkloadPriorityClass",
      False, returns_deleted_object=True, custom=True),
    # Topology Aware Scheduling's levels: v1alpha1 since 0.9, v1beta1 and v1beta2 later.
    R("kueue.x-k8s.io", (*KUEUE_VERSIONS, "v1alpha1"), "topologies", "Topology", False,
      returns_deleted_object=True, custom=True),
    R("topology.node.k8s.io", ("v1alpha2", "v1alpha1"), "noderesourcetopologies",
      "NodeResourceTopology", False, (), ("node-res-topo",), returns_deleted_object=True,
      custom=True),
)  # fmt: skip

BY_KEY: dict[str, Resource] = {r.key: r for r in TABLE}


def resource(group: str, plural: str) -> Resource | None:
    return BY_KEY.get(f"{group}/{plural}")


def core(plural: str) -> Resource:
    return BY_KEY[f"/{plural}"]


def stored(resource: Resource) -> Resource:
    """The resource whose objects `resource` serves (itself, unless it is another shape)."""
    return BY_KEY[resource.storage_key]


STORED = tuple(r for r in TABLE if not r.stored_as)  # every stored resource once


def named(key: str) -> Resource:
    """A resource by `group/plural` (`/pods`, `policy/poddisruptionbudgets`) or by a bare plural
    that only one group serves (`pods`, `leases`)."""
    if key in BY_KEY:
        return BY_KEY[key]
    matches = [r for r in STORED if r.plural == key]
    if len(matches) != 1:
        raise KeyError(f"{key!r} names {len(matches)} resources; use group/plural")
    return matches[0]


def groups() -> dict[str, list[str]]:
    """Served group -> versions, in table order (the core group left out)."""
    served: dict[str, list[str]] = {}
    for r in TABLE:
        if r.group:
            versions = served.setdefault(r.group, [])
            versions.extend(v for v in r.versions if v not in versions)
    return served
