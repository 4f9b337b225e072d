"""What every pod of a pod set asks for, as submitted (REST API, simulator, Kubernetes). Pure data:
the Kubernetes translation imports it without Django."""

from __future__ import annotations

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
