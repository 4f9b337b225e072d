"""NodeResourceTopology (topology.node.k8s.io v1alpha2, and v1alpha1): per NUMA zone, the GPUs and
CPUs a node has, and the kubelet's Topology Manager policy.

One cluster-scoped object per node, named after it; zones `node-<numa id>` of type `Node`, each with
`resources[{name, capacity, allocatable, available}]` (quantities as strings). v1alpha2 carries the
policy in `attributes` (`topologyManagerPolicy`); v1alpha1 only in the deprecated
`topologyPolicies` list (reference/wire-formats.md §5).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scheduling.core import quantity
from scheduling.core.types import GPU_RESOURCE

GROUP = "topology.node.k8s.io"
PLURAL = "noderesourcetopologies"
VERSIONS = ("v1alpha2", "v1alpha1")

_ZONE = re.compile(r"^node-(\d+)$")
_LEGACY_POLICIES = (
    ("SingleNUMANode", "single-numa-node"),
    ("Restricted", "restricted"),
    ("BestEffort", "best-effort"),
    ("None", "none"),
)


class NrtError(ValueError):
    """An NRT object that cannot be read; the message names the zone or field."""


@dataclass(frozen=True, slots=True)
class NrtInfo:
    zone_gpus: tuple[int, ...]  # whole GPUs per NUMA id (index = NUMA id)
    zone_cpus: tuple[int, ...]  # logical CPUs per NUMA id
    policy: str  # kubelet topologyManagerPolicy, "" when not reported
    scope: str  # "container" | "pod" | ""

    @property
    def gpu_numa(self) -> tuple[int, ...]:
        """The NUMA id of each GPU, GPUs numbered zone by zone."""
        return tuple(numa for numa, count in enumerate(self.zone_gpus) for _ in range(count))


def parse(doc: Mapping[str, Any]) -> NrtInfo:
    zones: dict[int, tuple[int, int]] = {}
    raw_zones = doc.get("zones") or []
    if not isinstance(raw_zones, list):
        raise NrtError("zones must be a list")
    for zone in raw_zones:
        if not isinstance(zone, Mapping):
            raise NrtError("every zone must be an object")
        if zone.get("type", "Node") != "Node":
            continue  # other zone types (e.g. cores) say nothing about NUMA nodes
        name = str(zone.get("name", ""))
        match = _ZONE.match(name)
        if not match:
            raise NrtError(f"zone {name!r} is not named node-<numa id>")
        resources = {
            str(r.get("name")): r for r in zone.get("resources") or [] if isinstance(r, Mapping)
        }
        zones[int(match.group(1))] = (
            _amount(resources.get(GPU_RESOURCE), name),
            _amount(resources.get("cpu"), name),
        )
    size = max(zones, default=-1) + 1
    return NrtInfo(
        zone_gpus=tuple(zones.get(i, (0, 0))[0] for i in range(size)),
        zone_cpus=tuple(zones.get(i, (0, 0))[1] for i in range(size)),
        policy=_policy(doc),
        scope=_attribute(doc, "topologyManagerScope"),
    )


def _amount(resource: Mapping[str, Any] | None, zone: str) -> int:
    if resource is None:
        return 0
    value = resource.get("capacity", resource.get("allocatable", "0"))
    try:
        return int(quantity.parse(value))
    except quantity.QuantityError as exc:
        raise NrtError(f"zone {zone}: {resource.get('name')} quantity: {exc}") from exc


def _attribute(doc: Mapping[str, Any], name: str) -> str:
    for attribute in doc.get("attributes") or []:
        if isinstance(attribute, Mapping) and attribute.get("name") == name:
            return str(attribute.get("value", ""))
    return ""


def _policy(doc: Mapping[str, Any]) -> str:
    policy = _attribute(doc, "topologyManagerPolicy")
    if policy:
        return policy
    for legacy in doc.get("topologyPolicies") or []:
        for prefix, name in _LEGACY_POLICIES:
            if str(legacy).startswith(prefix):
                return name
    return ""
