"""Pods: the API server's defaults and admission at create, validation, graceful deletion.

At create (k8s.io/kubernetes pkg/apis/core/v1/defaults.go and the default admission plugins):
schedulerName `default-scheduler`, restartPolicy `Always`, terminationGracePeriodSeconds 30,
container requests defaulted from limits; the Priority plugin resolves priorityClassName into
spec.priority and spec.preemptionPolicy (403 for an unknown class or a conflicting value);
DefaultTolerationSeconds adds the not-ready / unreachable NoExecute tolerations; the status
starts as `Pending` with its QoS class.

On update the spec is immutable except what the API server lets change: container images,
activeDeadlineSeconds, added tolerations, removed scheduling gates, and, while the pod is still
gated, added node selectors and affinity (KEP-3838, what Kueue does when it admits a pod).
Scheduling gates may only be removed. The status subresource checks phases and conditions.

Deletion is graceful: a bound, running pod gets deletionTimestamp = now + its grace period and is
removed when the kubelet has stopped it; an unbound or finished pod goes at once.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from kubernetes.utils import parse_quantity

from sim.kubernetes import errors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules
from sim.kubernetes.meta import TIME, clone, is_dns_label, qualified_name_problem
from sim.kubernetes.resources import named

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]

DEFAULT_GRACE_S = 30
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
TERMINAL = ("Succeeded", "Failed")
STANDARD = ("cpu", "memory", "ephemeral-storage", "hugepages-1Gi", "hugepages-2Mi")
DEFAULT_TOLERATIONS = (
    {
        "key": "node.kubernetes.io/not-ready",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
    {
        "key": "node.kubernetes.io/unreachable",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    },
)
# Spec fields an update may change (anything else is 422 Forbidden).
MUTABLE_SPEC = ("activeDeadlineSeconds", "tolerations", "schedulingGates", "containers")
MUTABLE_WHILE_GATED = ("nodeSelector", "affinity")


class PodRules(Rules):
    def prepare_create(self, api: Registry, obj: Obj) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            raise errors.bad_request("spec must be an object")
        default_spec(spec)
        _admit_priority(api, obj)
        tolerations = spec.setdefault("tolerations", [])
        for default in DEFAULT_TOLERATIONS:
            if not any(
                t.get("key") == default["key"] and t.get("effect") in (None, "", "NoExecute")
                for t in tolerations
                if isinstance(t, dict)
            ):
                tolerations.append(dict(default))
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}

    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        if subresource == "status":
            return _validate_status(obj)
        problems = validate_spec(obj.get("spec"))
        if old is not None:
            problems += _validate_update(obj.get("spec") or {}, old.get("spec") or {})
        return problems

    def grace_period_s(self, obj: Obj, requested: int | None) -> int:
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") or (obj.get("status") or {}).get("phase") in TERMINAL:
            return 0  # never started, or already finished: nothing to stop
        if requested is not None:
            return max(0, requested)
        return int(spec.get("terminationGracePeriodSeconds", DEFAULT_GRACE_S))


def default_spec(spec: Obj) -> None:
    """SetDefaults_PodSpec's defaults the simulation reads (pods, and the pod templates of Jobs)."""
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", DEFAULT_GRACE_S)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        if isinstance(container, dict):
            _default_requests(container)


def _default_requests(container: Obj) -> None:
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)


def _admit_priority(api: Registry, pod: Obj) -> None:
    spec = pod["spec"]
    name = str(pod["metadata"].get("name") or "")
    classes = named("scheduling.k8s.io/priorityclasses")
    class_name = spec.get("priorityClassName") or ""
    chosen: Obj | None = None
    if class_name:
        chosen = api.storage.get(classes, "", class_name)
        if chosen is None:
            raise errors.forbidden(
                named("/pods"), name, f"no PriorityClass with name {class_name} was found"
            )
    else:
        chosen = next((c for c in api.storage.items(classes) if c.get("globalDefault")), None)
        if chosen is not None:
            spec["priorityClassName"] = chosen["metadata"]["name"]
    value = int(chosen.get("value", 0)) if chosen else 0
    given = spec.get("priority")
    if given is not None and given != value:
        raise errors.forbidden(
            named("/pods"),
            name,
            f"the integer value of priority ({given}) must not be provided in pod spec; priority "
            f"admission controller computed {value} from the given PriorityClass name",
        )
    spec["priority"] = value
    policy = (chosen or {}).get("preemptionPolicy") or "PreemptLowerPriority"
    if spec.get("preemptionPolicy") not in (None, policy):
        raise errors.forbidden(
            named("/pods"),
            name,
            f"the string value of PreemptionPolicy ({spec['preemptionPolicy']}) must not be "
            f"provided in pod spec; priority admission controller computed {policy} from the "
            "given PriorityClass name",
        )
    spec["preemptionPolicy"] = policy


def qos_class(spec: Obj) -> str:
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set, guaranteed = False, True
    for container in containers:
        resources = (container.get("resources") or {}) if isinstance(container, dict) else {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            if name not in limits or _q(requests.get(name, limits[name])) != _q(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _q(value: object) -> Decimal | None:
    try:
        return Decimal(parse_quantity(value))
    except (ValueError, InvalidOperation, TypeError):
        return None


def validate_spec(spec: Any, at: str = "spec") -> list[FieldError]:
    """A pod spec's checks, reported under `at` (`spec.template.spec` in a Job)."""
    if not isinstance(spec, dict):
        return [errors.required(at)]
    problems: list[FieldError] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append(errors.required(f"{at}.containers"))
        containers = []
    seen: set[str] = set()
    for group in ("initContainers", "containers"):
        for k, container in enumerate(spec.get(group) or []):
            path = f"{at}.{group}[{k}]"
            if not isinstance(container, dict):
                problems.append(errors.invalid(path, container, "must be an object"))
                continue
            name = container.get("name")
            if not name:
                problems.append(errors.required(f"{path}.name"))
            elif not is_dns_label(str(name)):
                problems.append(errors.invalid(f"{path}.name", name, "must be a DNS label"))
            elif name in seen:
                problems.append(errors.duplicate(f"{path}.name", name))
            seen.add(str(name))
            if not container.get("image"):
                problems.append(errors.required(f"{path}.image"))
            problems += _validate_resources(container.get("resources") or {}, f"{path}.resources")
    gates = spec.get("schedulingGates") or []
    names = [g.get("name") if isinstance(g, dict) else None for g in gates]
    for k, gate in enumerate(names):
        why = qualified_name_problem(str(gate or ""))
        if why:
            problems.append(errors.invalid(f"{at}.schedulingGates[{k}].name", gate, why))
        elif names.index(gate) != k:
            problems.append(errors.duplicate(f"{at}.schedulingGates[{k}].name", gate))
    grace = spec.get("terminationGracePeriodSeconds")
    if grace is not None and (not isinstance(grace, int) or grace < 0):
        problems.append(
            errors.invalid(f"{at}.terminationGracePeriodSeconds", grace, "must be >= 0")
        )
    return problems


def _validate_resources(resources: Obj, path: str) -> list[FieldError]:
    problems: list[FieldError] = []
    parsed: dict[str, dict[str, Decimal]] = {}
    for part in ("limits", "requests"):
        parsed[part] = {}
        for name, value in (resources.get(part) or {}).items():
            quantity = _q(value)
            if quantity is None:
                problems.append(
                    errors.invalid(
                        f"{path}.{part}[{name}]",
                        value,
                        "quantities must match the regular expression "
                        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
                    )
                )
                continue
            if quantity < 0:
                problems.append(errors.invalid(f"{path}.{part}[{name}]", value, "must be >= 0"))
            parsed[part][name] = quantity
    for name, request in parsed["requests"].items():
        limit = parsed["limits"].get(name)
        extended = name not in STANDARD and "/" in name
        if extended:
            if request != request.to_integral_value():
                problems.append(
                    errors.invalid(f"{path}.requests[{name}]", str(request), "must be an integer")
                )
            if limit is None or limit != request:
                problems.append(
                    errors.invalid(
                        f"{path}.requests[{name}]",
                        resources["requests"][name],
                        f"must be equal to {name} limit of {_limit(resources, name)}",
                    )
                )
        elif limit is not None and request > limit:
            problems.append(
                errors.invalid(
                    f"{path}.requests",
                    resources["requests"][name],
                    f"must be less than or equal to {name} limit of {resources['limits'][name]}",
                )
            )
    return problems


def _limit(resources: Obj, name: str) -> object:
    return (resources.get("limits") or {}).get(name, 0)


def _validate_update(new: Obj, old: Obj) -> list[FieldError]:
    problems: list[FieldError] = []
    old_gates = [g.get("name") for g in old.get("schedulingGates") or []]
    for gate in new.get("schedulingGates") or []:
        if gate.get("name") not in old_gates:
            problems.append(
                errors.forbidden_field(
                    "spec.schedulingGates",
                    f"only deletion is allowed, but found new scheduling gate '{gate.get('name')}'",
                )
            )
    old_tolerations = old.get("tolerations") or []
    if any(t not in (new.get("tolerations") or []) for t in old_tolerations):
        problems.append(
            errors.forbidden_field("spec.tolerations", "existing toleration can not be modified")
        )
    gated = bool(old_gates)
    for key in MUTABLE_WHILE_GATED:
        if new.get(key) != old.get(key) and not (gated and _only_adds(old.get(key), new.get(key))):
            problems.append(errors.forbidden_field(f"spec.{key}", _IMMUTABLE))
    frozen_new = _frozen(new)
    frozen_old = _frozen(old)
    if frozen_new != frozen_old:
        problems.append(errors.forbidden_field("spec", _IMMUTABLE))
    return problems


_IMMUTABLE = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set "
    "to 1 if it was previously negative)"
)


def _only_adds(old: Any, new: Any) -> bool:
    if old in (None, {}):
        return True
    if isinstance(old, dict) and isinstance(new, dict):
        return all(k in new and _only_adds(v, new[k]) for k, v in old.items())
    return bool(old == new)


def _frozen(spec: Obj) -> Obj:
    frozen = {k: v for k, v in spec.items() if k not in (*MUTABLE_SPEC, *MUTABLE_WHILE_GATED)}
    frozen["containers"] = [
        {k: v for k, v in c.items() if k != "image"} if isinstance(c, dict) else c
        for c in spec.get("containers") or []
    ]
    return clone(frozen)


def _validate_status(pod: Obj) -> list[FieldError]:
    status = pod.get("status") or {}
    problems: list[FieldError] = []
    phase = status.get("phase")
    if phase is not None and phase not in PHASES:
        problems.append(errors.not_supported("status.phase", phase, PHASES))
    for k, condition in enumerate(status.get("conditions") or []):
        path = f"status.conditions[{k}]"
        if not isinstance(condition, dict):
            problems.append(errors.invalid(path, condition, "must be an object"))
            continue
        if not condition.get("type"):
            problems.append(errors.required(f"{path}.type"))
        if condition.get("status") not in ("True", "False", "Unknown"):
            problems.append(
                errors.not_supported(
                    f"{path}.status", condition.get("status"), ("False", "True", "Unknown")
                )
            )
        for key in ("lastTransitionTime", "lastProbeTime"):
            value = condition.get(key)
            if value is not None and not TIME.match(str(value)):
                problems.append(errors.invalid(f"{path}.{key}", value, "must be RFC 3339"))
    return problems
