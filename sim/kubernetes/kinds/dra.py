"""Dynamic Resource Allocation (resource.k8s.io/v1): the validation of
pkg/apis/resource/validation for the fields gpusched reads and writes.

- DeviceClass: selectors with a CEL expression each.
- ResourceSlice: driver, pool (name, generation, resourceSliceCount), exactly one of nodeName /
  nodeSelector / allNodes / perDeviceNodeSelection; devices with unique names, each attribute
  exactly one typed value, capacities as quantities.
- ResourceClaim: requests with unique names and exactly one of `exactly` / `firstAvailable`
  (defaults allocationMode ExactCount, count 1), constraints naming existing requests and a
  fully qualified matchAttribute; the spec immutable. Status: results naming a request, a
  driver, a pool and a device; reservedFor only while allocated, unique by uid, at most 256;
  an allocation is immutable and cleared only once nothing reserves the claim.

CEL expressions are stored as written and not compiled (the API server compiles them and refuses
syntax errors; the scheduler evaluates them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kubernetes.utils import parse_quantity

from sim.kubernetes import errors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules
from sim.kubernetes.meta import is_dns_label, is_dns_subdomain

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
ATTRIBUTE_TYPES = ("int", "bool", "string", "version")
NODE_CHOICES = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")
MAX_RESERVED = 256
MAX_DEVICES_PER_SLICE = 128


def _selectors(items: Any, path: str) -> list[FieldError]:
    problems = []
    for k, selector in enumerate(items or []):
        expression = ((selector or {}).get("cel") or {}).get("expression")
        if not expression:
            problems.append(errors.required(f"{path}[{k}].cel.expression"))
    return problems


class DeviceClassRules(Rules):
    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        return _selectors((obj.get("spec") or {}).get("selectors"), "spec.selectors")


class ResourceSliceRules(Rules):
    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        problems: list[FieldError] = []
        if not spec.get("driver"):
            problems.append(errors.required("spec.driver"))
        elif not is_dns_subdomain(str(spec["driver"])):
            problems.append(
                errors.invalid("spec.driver", spec["driver"], "must be a DNS subdomain")
            )
        pool = spec.get("pool") or {}
        if not pool.get("name"):
            problems.append(errors.required("spec.pool.name"))
        if not isinstance(pool.get("resourceSliceCount"), int) or pool["resourceSliceCount"] < 1:
            problems.append(
                errors.invalid(
                    "spec.pool.resourceSliceCount",
                    pool.get("resourceSliceCount"),
                    "must be greater than zero",
                )
            )
        chosen = [k for k in NODE_CHOICES if spec.get(k) not in (None, "", False)]
        if len(chosen) != 1:
            listed = ", ".join(f"`{k}`" for k in NODE_CHOICES)
            problems.append(errors.invalid("spec", chosen, f"exactly one of {listed} is required"))
        devices = spec.get("devices") or []
        if len(devices) > MAX_DEVICES_PER_SLICE:
            problems.append(errors.too_many("spec.devices", len(devices), MAX_DEVICES_PER_SLICE))
        names: set[str] = set()
        for k, device in enumerate(devices):
            path = f"spec.devices[{k}]"
            name = str((device or {}).get("name") or "")
            if not name:
                problems.append(errors.required(f"{path}.name"))
            elif not is_dns_label(name):
                problems.append(errors.invalid(f"{path}.name", name, "must be a DNS label"))
            elif name in names:
                problems.append(errors.duplicate(f"{path}.name", name))
            names.add(name)
            for attribute, value in ((device or {}).get("attributes") or {}).items():
                typed = [t for t in ATTRIBUTE_TYPES if isinstance(value, dict) and t in value]
                if len(typed) != 1:
                    problems.append(
                        errors.invalid(
                            f"{path}.attributes[{attribute}]",
                            value,
                            "exactly one value must be specified",
                        )
                    )
            for capacity, value in ((device or {}).get("capacity") or {}).items():
                try:
                    parse_quantity((value or {}).get("value"))
                except (ValueError, TypeError):
                    problems.append(
                        errors.invalid(
                            f"{path}.capacity[{capacity}].value", value, "must be a quantity"
                        )
                    )
        return problems


class ResourceClaimRules(Rules):
    def prepare_create(self, api: Registry, obj: Obj) -> None:
        for request in ((obj.get("spec") or {}).get("devices") or {}).get("requests") or []:
            if not isinstance(request, dict):
                continue
            parts = [request.get("exactly")] + list(request.get("firstAvailable") or [])
            for part in parts:
                if isinstance(part, dict):
                    part.setdefault("allocationMode", "ExactCount")
                    if part["allocationMode"] == "ExactCount":
                        part.setdefault("count", 1)

    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        if subresource == "status":
            return _validate_claim_status(obj, old)
        problems = _validate_claim_spec(obj.get("spec") or {})
        if old is not None and obj.get("spec") != old.get("spec"):
            problems.append(errors.invalid("spec", "", "field is immutable"))
        return problems


def _validate_claim_spec(spec: Obj) -> list[FieldError]:
    problems: list[FieldError] = []
    devices = spec.get("devices") or {}
    names: list[str] = []
    for k, request in enumerate(devices.get("requests") or []):
        path = f"spec.devices.requests[{k}]"
        name = str((request or {}).get("name") or "")
        if not name:
            problems.append(errors.required(f"{path}.name"))
        elif name in names:
            problems.append(errors.duplicate(f"{path}.name", name))
        names.append(name)
        exactly, first = request.get("exactly"), request.get("firstAvailable")
        if (exactly is None) == (not first):
            problems.append(
                errors.invalid(
                    path, request, "exactly one of `exactly` or `firstAvailable` is required"
                )
            )
            continue
        parts = (
            [(f"{path}.exactly", exactly)]
            if exactly is not None
            else [(f"{path}.firstAvailable[{j}]", sub) for j, sub in enumerate(first)]
        )
        for part_path, part in parts:
            problems += _validate_device_request(part or {}, part_path)
            if exactly is None:
                sub_name = str((part or {}).get("name") or "")
                names.append(f"{name}/{sub_name}")
                if not sub_name:
                    problems.append(errors.required(f"{part_path}.name"))
    for k, constraint in enumerate(devices.get("constraints") or []):
        path = f"spec.devices.constraints[{k}]"
        for j, ref in enumerate((constraint or {}).get("requests") or []):
            if ref not in names:
                problems.append(
                    errors.invalid(
                        f"{path}.requests[{j}]", ref, "must be the name of a request in the claim"
                    )
                )
        attribute = (constraint or {}).get("matchAttribute") or (constraint or {}).get(
            "distinctAttribute"
        )
        if not attribute:
            problems.append(errors.required(f"{path}.matchAttribute"))
        elif "/" not in str(attribute):
            problems.append(
                errors.invalid(
                    f"{path}.matchAttribute",
                    attribute,
                    "a fully qualified name must be a domain and a name separated by a slash",
                )
            )
    return problems


def _validate_device_request(part: Obj, path: str) -> list[FieldError]:
    problems: list[FieldError] = []
    if not part.get("deviceClassName"):
        problems.append(errors.required(f"{path}.deviceClassName"))
    mode = part.get("allocationMode", "ExactCount")
    if mode not in ("ExactCount", "All"):
        problems.append(errors.not_supported(f"{path}.allocationMode", mode, ("All", "ExactCount")))
    count = part.get("count")
    if mode == "ExactCount" and count is not None and (not isinstance(count, int) or count < 1):
        problems.append(errors.invalid(f"{path}.count", count, "must be greater than zero"))
    if mode == "All" and count is not None:
        problems.append(
            errors.invalid(
                f"{path}.count", count, "must not be specified when allocationMode is All"
            )
        )
    return problems + _selectors(part.get("selectors"), f"{path}.selectors")


def _validate_claim_status(claim: Obj, old: Obj | None) -> list[FieldError]:
    status = claim.get("status") or {}
    old_status = (old or {}).get("status") or {}
    problems: list[FieldError] = []
    allocation = status.get("allocation")
    request_names = set()
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        request_names.add(request.get("name"))
        for sub in request.get("firstAvailable") or []:
            request_names.add(f"{request.get('name')}/{sub.get('name')}")
    if allocation is not None:
        for k, result in enumerate(((allocation.get("devices") or {}).get("results")) or []):
            path = f"status.allocation.devices.results[{k}]"
            for key in ("request", "driver", "pool", "device"):
                if not (result or {}).get(key):
                    problems.append(errors.required(f"{path}.{key}"))
            if result.get("request") and result["request"] not in request_names:
                problems.append(
                    errors.invalid(
                        f"{path}.request",
                        result["request"],
                        "must be the name of a request in the claim or the name of a request and "
                        "a subrequest separated by '/'",
                    )
                )
    previous = old_status.get("allocation")
    if previous is not None and allocation is not None and allocation != previous:
        problems.append(errors.invalid("status.allocation", "", "field is immutable"))
    reserved = status.get("reservedFor") or []
    if previous is not None and allocation is None and reserved:
        problems.append(
            errors.forbidden_field(
                "status.allocation", "may not be cleared while the claim is reserved"
            )
        )
    if reserved and allocation is None:
        problems.append(
            errors.forbidden_field(
                "status.reservedFor", "may not be specified when `allocated` is not set"
            )
        )
    if len(reserved) > MAX_RESERVED:
        problems.append(errors.too_many("status.reservedFor", len(reserved), MAX_RESERVED))
    uids: set[str] = set()
    for k, consumer in enumerate(reserved):
        for key in ("resource", "name", "uid"):
            if not (consumer or {}).get(key):
                problems.append(errors.required(f"status.reservedFor[{k}].{key}"))
        uid = str((consumer or {}).get("uid"))
        if uid in uids:
            problems.append(errors.duplicate(f"status.reservedFor[{k}].uid", uid))
        uids.add(uid)
    return problems
