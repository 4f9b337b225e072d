"""What each kind does beyond the registry's generic metadata handling: defaults and admission
at create, validation, and (pods) graceful deletion. One `Rules` per kind that needs any, by
resource key; every other kind gets the base (metadata checks only). A resource served in
another shape than it is stored (core/v1 events) has a `View` converting it."""

from __future__ import annotations

from sim.kubernetes.kinds import events
from sim.kubernetes.kinds.base import Rules, View
from sim.kubernetes.kinds.dra import DeviceClassRules, ResourceClaimRules, ResourceSliceRules
from sim.kubernetes.kinds.events import CoreEventRules, EventRules
from sim.kubernetes.kinds.jobs import JobRules
from sim.kubernetes.kinds.leases import LeaseRules
from sim.kubernetes.kinds.pods import PodRules
from sim.kubernetes.kinds.policy import PodDisruptionBudgetRules
from sim.kubernetes.kinds.scheduling import (
    KubernetesPodGroupRules,
    MinMemberPodGroupRules,
    NamespaceRules,
    PriorityClassRules,
)

GENERIC = Rules()
RULES: dict[str, Rules] = {
    "/pods": PodRules(),
    "/namespaces": NamespaceRules(),
    "events.k8s.io/events": EventRules(),
    "/events": CoreEventRules(),
    "coordination.k8s.io/leases": LeaseRules(),
    "batch/jobs": JobRules(),
    "policy/poddisruptionbudgets": PodDisruptionBudgetRules(),
    "scheduling.k8s.io/priorityclasses": PriorityClassRules(),
    "scheduling.k8s.io/podgroups": KubernetesPodGroupRules(),
    "scheduling.x-k8s.io/podgroups": MinMemberPodGroupRules(),
    "scheduling.volcano.sh/podgroups": MinMemberPodGroupRules(),
    "resource.k8s.io/deviceclasses": DeviceClassRules(),
    "resource.k8s.io/resourceslices": ResourceSliceRules(),
    "resource.k8s.io/resourceclaims": ResourceClaimRules(),
}


def rules_for(key: str) -> Rules:
    return RULES.get(key, GENERIC)


VIEWS: dict[str, View] = {"/events": View(out=events.to_core, into=events.from_core)}


def view_for(key: str) -> View | None:
    return VIEWS.get(key)
