"""Kueue's Topology kind (Topology Aware Scheduling's levels) read into the core's Topology: its
`spec` as Kueue's API validates it (apis/kueue/*/topology_types.go: 1-16 levels, unique, each a
node label key, kubernetes.io/hostname only as the lowest)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from scheduling.core.domains import DomainError, Topology
from scheduling.core.queueing.config import QueueConfigError
from scheduling.core.queueing.kueue_fields import list_of, mapping, no_unknown

# Kueue serves Topology in v1alpha1 (since v0.9), v1beta1 and v1beta2, the same spec in each.
VERSIONS = ("kueue.x-k8s.io/v1alpha1", "kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2")
# TopologyLevel.nodeLabel's pattern: an optional DNS prefix and a label name.
_LABEL_KEY = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])"
)
_LABEL_MAX = 316


def topology(name: str, spec: Mapping[str, Any], path: str) -> Topology:
    """Topology `name` of `spec` (at `path`, which errors name)."""
    no_unknown(spec, {"levels"}, path)
    labels = []
    for k, item in enumerate(list_of(spec.get("levels"), f"{path}.levels")):
        level = mapping(item, f"{path}.levels[{k}]")
        no_unknown(level, {"nodeLabel"}, f"{path}.levels[{k}]")
        label = level.get("nodeLabel")
        if not isinstance(label, str) or len(label) > _LABEL_MAX or not _LABEL_KEY.fullmatch(label):
            raise QueueConfigError(f"{path}.levels[{k}].nodeLabel must be a node label key")
        labels.append(label)
    try:
        return Topology(name, tuple(labels))
    except DomainError as exc:
        raise QueueConfigError(f"{path}.levels: {exc}") from None
