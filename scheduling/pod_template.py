"""What every pod of a pod set asks for, as submitted (REST API, simulator, Kubernetes). Pure data:
the Kubernetes translation imports it without Django."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduling.core.types import TopologyPolicy, TopologyScope


@dataclass(frozen=True)
class PodTemplate:
    cpu_milli: int = 0
    memory_mib: int = 0
    gpus: int = 0
    gpu_milli: int = 0
    mig_profile: str = ""
    mig_count: int = 0
    gpu_models: tuple[str, ...] = ()
    topology_policy: TopologyPolicy | None = None  # None: the pod named none
    topology_scope: TopologyScope | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: tuple[dict[str, str], ...] = ()
    simulation: dict[str, Any] = field(default_factory=dict)  # the simulator's run time and use
    # Extended resources (`example.com/credits`, `rdma/hca`): whole units per pod, counted against
    # quota (scheduling.core.queueing.resources), not placed on nodes.
    extended: dict[str, int] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        """Asks for nothing the scheduler accounts (no CPU, memory, GPU or extended resource)."""
        return not (
            self.cpu_milli
            or self.memory_mib
            or self.gpus
            or self.gpu_milli
            or self.mig_count
            or any(self.extended.values())
        )
