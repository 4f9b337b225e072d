"""Namespaces, PriorityClasses and the pod-group kinds gang schedulers read.

- PriorityClass (scheduling.k8s.io/v1): value required, at most 1e9 unless a system class,
  the `system-` prefix reserved, value immutable, preemptionPolicy Never | PreemptLowerPriority,
  one globalDefault at most (403, as the Priority admission plugin answers).
- PodGroup of the Kubernetes PodGroup API (scheduling.k8s.io/v1beta1, KEP-4671):
  spec.schedulingPolicy with exactly one of `basic` and `gang`, gang.minCount > 0.
- PodGroup of scheduler-plugins coscheduling (scheduling.x-k8s.io/v1alpha1) and of Volcano
  (scheduling.volcano.sh/v1beta1): spec.minMember a non-negative integer, as their CRD schemas
  say (messages in the CRD schema validator's words).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import errors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules
from sim.kubernetes.resources import named

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
SYSTEM_CLASSES = {"system-node-critical": 2_000_001_000, "system-cluster-critical": 2_000_000_000}
USER_MAX = 1_000_000_000


class NamespaceRules(Rules):
    dns_label_names = True

    def prepare_create(self, api: Registry, obj: Obj) -> None:
        name = str(obj["metadata"].get("name") or "")
        obj["metadata"].setdefault("labels", {})["kubernetes.io/metadata.name"] = name
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}


class PriorityClassRules(Rules):
    def prepare_create(self, api: Registry, obj: Obj) -> None:
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        if obj.get("globalDefault"):
            resource = named("scheduling.k8s.io/priorityclasses")
            other = next((c for c in api.storage.items(resource) if c.get("globalDefault")), None)
            if other is not None:
                raise errors.forbidden(
                    resource,
                    str(obj["metadata"].get("name", "")),
                    f"PriorityClass {other['metadata']['name']} is already marked as default. "
                    "Only one default can exist",
                )

    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        name = str(obj["metadata"].get("name", ""))
        value = obj.get("value")
        problems: list[FieldError] = []
        if not isinstance(value, int) or isinstance(value, bool):
            problems.append(errors.required("value"))
        elif name in SYSTEM_CLASSES:
            if value != SYSTEM_CLASSES[name]:
                problems.append(
                    errors.forbidden_field("value", "system priority classes are fixed")
                )
        elif name.startswith("system-"):
            problems.append(
                errors.forbidden_field(
                    "metadata.name", "priority class names with 'system-' prefix are reserved"
                )
            )
        elif value > USER_MAX:
            problems.append(
                errors.forbidden_field(
                    "value", f"maximum allowed value of a user defined priority is {USER_MAX}"
                )
            )
        if old is not None and value != old.get("value"):
            problems.append(errors.forbidden_field("value", "may not be changed in an update."))
        policy = obj.get("preemptionPolicy")
        if policy not in ("Never", "PreemptLowerPriority"):
            problems.append(
                errors.not_supported("preemptionPolicy", policy, ("Never", "PreemptLowerPriority"))
            )
        return problems


class KubernetesPodGroupRules(Rules):
    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        policy = (obj.get("spec") or {}).get("schedulingPolicy")
        if not isinstance(policy, dict):
            return [errors.required("spec.schedulingPolicy")]
        chosen = [k for k in ("basic", "gang") if policy.get(k) is not None]
        if len(chosen) != 1:
            return [
                errors.invalid(
                    "spec.schedulingPolicy", policy, "exactly one of `basic`, `gang` is required"
                )
            ]
        if chosen == ["gang"]:
            count = (policy["gang"] or {}).get("minCount")
            if not isinstance(count, int) or isinstance(count, bool):
                return [errors.required("spec.schedulingPolicy.gang.minCount")]
            if count <= 0:
                return [
                    errors.invalid(
                        "spec.schedulingPolicy.gang.minCount", count, "must be greater than zero"
                    )
                ]
        return []


class MinMemberPodGroupRules(Rules):
    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        problems: list[FieldError] = []
        for key in ("minMember", "scheduleTimeoutSeconds"):
            value = spec.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool):
                problems.append(
                    errors.invalid(
                        f"spec.{key}", value, f"spec.{key} in body must be of type integer"
                    )
                )
            elif value < 0:
                problems.append(
                    errors.invalid(
                        f"spec.{key}",
                        value,
                        f"spec.{key} in body should be greater than or equal to 0",
                    )
                )
        return problems
