"""Which gang a Kubernetes pod belongs to, in the four vocabularies clusters use, and how many of
its pods must be placed together. Pure: pods and group objects in, references and counts out.

- Kueue's plain pod groups (KEP-976): label `kueue.x-k8s.io/pod-group-name`, annotation
  `kueue.x-k8s.io/pod-group-total-count`; Kueue admits the group once all its pods exist, so all of
  them are the quorum.
- scheduler-plugins coscheduling: label `scheduling.x-k8s.io/pod-group` naming a PodGroup
  (scheduling.x-k8s.io/v1alpha1) in the pod's namespace, `spec.minMember`.
- Volcano: annotation `scheduling.k8s.io/group-name` naming a PodGroup (scheduling.volcano.sh/
  v1beta1), `spec.minMember` (the seeds' example pod carries it).
- the Kubernetes PodGroup API (gang scheduling, KEP-4671: alpha in v1.35, beta in v1.37):
  `spec.schedulingGroup.podGroupName` naming a PodGroup (scheduling.k8s.io v1beta1, else
  v1alpha2) whose `spec.schedulingPolicy` is `gang: {minCount}` (or `basic`: no gang).

Sources: docs/kubernetes.md ("Pods, tenants, queues and gangs").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KUEUE_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_COUNT = "kueue.x-k8s.io/pod-group-total-count"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"

KUEUE, COSCHEDULING, VOLCANO, KUBERNETES = "kueue", "coscheduling", "volcano", "kubernetes"


@dataclass(frozen=True)
class GroupKind:
    """A kind of pod-group object: where it is served (the first version a cluster serves)."""

    name: str
    group: str
    versions: tuple[str, ...]
    plural: str


# The group objects the side lists (Kueue's groups need none: the count is on the pods).
GROUP_OBJECTS: dict[str, GroupKind] = {
    COSCHEDULING: GroupKind(COSCHEDULING, "scheduling.x-k8s.io", ("v1alpha1",), "podgroups"),
    VOLCANO: GroupKind(VOLCANO, "scheduling.volcano.sh", ("v1beta1",), "podgroups"),
    KUBERNETES: GroupKind(KUBERNETES, "scheduling.k8s.io", ("v1beta1", "v1alpha2"), "podgroups"),
}


@dataclass(frozen=True)
class GroupRef:
    kind: str
    namespace: str
    name: str

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.namespace}/{self.name}"


class GroupError(ValueError):
    """A group the pod names but whose quorum cannot be known; the message says why."""


def group_of(pod: Mapping[str, Any]) -> GroupRef | None:
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    namespace = str(meta.get("namespace") or "default")
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    scheduling_group = spec.get("schedulingGroup") or {}
    if labels.get(KUEUE_GROUP_LABEL):
        return GroupRef(KUEUE, namespace, str(labels[KUEUE_GROUP_LABEL]))
    if labels.get(COSCHEDULING_LABEL):
        return GroupRef(COSCHEDULING, namespace, str(labels[COSCHEDULING_LABEL]))
    if scheduling_group.get("podGroupName"):
        return GroupRef(KUBERNETES, namespace, str(scheduling_group["podGroupName"]))
    if annotations.get(VOLCANO_ANNOTATION):
        return GroupRef(VOLCANO, namespace, str(annotations[VOLCANO_ANNOTATION]))
    return None


def quorum(
    ref: GroupRef, pod: Mapping[str, Any], objects: Mapping[str, Mapping[str, Any]]
) -> int | None:
    """How many of the group's pods must be placed together; None: not a gang (a Kubernetes
    PodGroup with the basic policy). `objects` holds the group objects by `GroupRef.key`."""
    if ref.kind == KUEUE:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        return _count(annotations.get(KUEUE_TOTAL_COUNT), f"annotation {KUEUE_TOTAL_COUNT}")
    obj = objects.get(ref.key)
    kind = GROUP_OBJECTS[ref.kind]
    if obj is None:
        raise GroupError(f"PodGroup {ref.namespace}/{ref.name} ({kind.group}) does not exist")
    spec = obj.get("spec") or {}
    if ref.kind == KUBERNETES:
        policy = spec.get("schedulingPolicy") or {}
        if "gang" not in policy:
            return None
        return _count((policy.get("gang") or {}).get("minCount"), "spec.schedulingPolicy.gang")
    return _count(spec.get("minMember"), f"PodGroup {ref.name} spec.minMember")


def object_ref(kind: str, obj: Mapping[str, Any]) -> GroupRef:
    meta = obj.get("metadata") or {}
    return GroupRef(kind, str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _count(value: object, where: str) -> int:
    try:
        count = int(str(value))
    except ValueError:
        raise GroupError(f"{where}: {value!r} is not a whole number of pods") from None
    if count < 1:
        raise GroupError(f"{where}: must be at least 1, got {count}")
    return count
