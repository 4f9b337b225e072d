"""What every pod of a pod set asks for, as submitted (REST API, simulator, Kubernetes). Pure data:
the Kubernetes translation imports it without Django."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduling.core.types import Resources, TopologyPolicy, TopologyScope


@dataclass(frozen=True)
class PodTemplate:
    resources: Resources = Resources()
    gpu_models: tuple[str, ...] = ()
    topology_policy: TopologyPolicy | None = None  # None: the pod named none
    topology_scope: TopologyScope | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, str], ...] = ()

    @property
    def empty(self) -> bool:
        """Asks for nothing the scheduler accounts (no CPU, memory, GPU or extended resource)."""
        return self.resources.empty

    @property
    def constraints_digest(self) -> str:
        return constraints_digest(self.node_selector, self.tolerations, self.gpu_models)


def constraints_digest(
    node_selector: Mapping[str, str],
    tolerations: Iterable[Mapping[str, str]],
    gpu_models: Iterable[str],
) -> str:
    """The key of a pod's constraints as stored (models.PodConstraints): sha256 of their canonical
    JSON (selector keys sorted, tolerations and models in their order). Stable: rows written by
    earlier versions (migration 0020) are found again by it."""
    doc = {
        "gpu_models": list(gpu_models),
        "node_selector": dict(node_selector),
        "tolerations": [dict(t) for t in tolerations],
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()
