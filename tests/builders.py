"""Fluent builders for core objects, in the spirit of kube-scheduler's st.MakePod()."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

from scheduling.core.topology import NodeTopology, parse_nvidia_smi_topo, uniform
from scheduling.core.types import (
    GpuDevice,
    NodeSpec,
    PodRequest,
    SharingMode,
    Taint,
    Toleration,
    TopologyPolicy,
    TopologyScope,
)

TOPOLOGY_DIR = Path(__file__).resolve().parents[1] / "data" / "topologies"
TOPOLOGY_NAMES = ("dgx-a100", "dgx-h100", "pcie-8gpu-2socket", "pcie-8gpu-nvbridge", "t4-2gpu")


@cache
def topology(name: str) -> NodeTopology:
    return parse_nvidia_smi_topo((TOPOLOGY_DIR / f"{name}.topo").read_text())


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self.spec = NodeSpec(name=name, cpu_milli=64_000, memory_mib=512 * 1024)

    def topology(
        self, name: str, model: str = "H100", sharing: SharingMode = SharingMode.TIME_SLICING
    ) -> NodeBuilder:
        topo = topology(name)
        gpus = tuple(
            GpuDevice(i, model, 80 * 1024, f"GPU-{self.spec.name}-{i}", sharing)
            for i in range(topo.gpu_count)
        )
        self.spec = replace(self.spec, gpus=gpus, topology=topo)
        return self

    def topology_of(self, topo: NodeTopology | None, model: str = "H100") -> NodeBuilder:
        """GPUs on a topology built in the test; None: as many GPUs, topology unknown."""
        count = topo.gpu_count if topo is not None else len(self.spec.gpus)
        gpus = tuple(
            GpuDevice(i, model, 80 * 1024, f"GPU-{self.spec.name}-{i}", SharingMode.EXCLUSIVE)
            for i in range(count)
        )
        self.spec = replace(self.spec, gpus=gpus, topology=topo)
        return self

    def gpus(
        self, count: int, model: str = "T4", sharing: SharingMode = SharingMode.TIME_SLICING
    ) -> NodeBuilder:
        gpus = tuple(
            GpuDevice(i, model, 16 * 1024, f"GPU-{self.spec.name}-{i}", sharing)
            for i in range(count)
        )
        self.spec = replace(self.spec, gpus=gpus, topology=uniform(count))
        return self

    def mig(self, *layouts: tuple[str, ...], model: str = "A100") -> NodeBuilder:
        gpus = tuple(
            GpuDevice(i, model, 80 * 1024, f"GPU-{self.spec.name}-{i}", SharingMode.MIG, layout)
            for i, layout in enumerate(layouts)
        )
        self.spec = replace(self.spec, gpus=gpus, topology=uniform(len(gpus)))
        return self

    def cpu(self, milli: int) -> NodeBuilder:
        self.spec = replace(self.spec, cpu_milli=milli)
        return self

    def memory(self, mib: int) -> NodeBuilder:
        self.spec = replace(self.spec, memory_mib=mib)
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        self.spec = replace(self.spec, labels=dict(labels))
        return self

    def taint(self, key: str, value: str = "") -> NodeBuilder:
        self.spec = replace(self.spec, taints=(*self.spec.taints, Taint(key, value)))
        return self

    def cordon(self) -> NodeBuilder:
        self.spec = replace(self.spec, cordoned=True)
        return self

    def build(self) -> NodeSpec:
        return self.spec


class PodBuilder:
    def __init__(self, uid: str) -> None:
        self.spec = PodRequest(uid=uid, name=uid, cpu_milli=1000, memory_mib=1024)

    def gpus(self, count: int) -> PodBuilder:
        self.spec = replace(self.spec, gpus=count)
        return self

    def share(self, milli: int) -> PodBuilder:
        self.spec = replace(self.spec, gpu_milli=milli)
        return self

    def mig(self, profile: str, count: int = 1) -> PodBuilder:
        self.spec = replace(self.spec, mig_profile=profile, mig_count=count)
        return self

    def cpu(self, milli: int) -> PodBuilder:
        self.spec = replace(self.spec, cpu_milli=milli)
        return self

    def memory(self, mib: int) -> PodBuilder:
        self.spec = replace(self.spec, memory_mib=mib)
        return self

    def models(self, *models: str) -> PodBuilder:
        self.spec = replace(self.spec, gpu_models=frozenset(models))
        return self

    def policy(self, policy: str, scope: str | None = None) -> PodBuilder:
        self.spec = replace(
            self.spec,
            topology_policy=TopologyPolicy(policy),
            topology_scope=TopologyScope(scope) if scope else None,
        )
        return self

    def selector(self, **labels: str) -> PodBuilder:
        self.spec = replace(self.spec, node_selector=dict(labels))
        return self

    def tolerate(self, key: str, value: str = "", operator: str = "Equal") -> PodBuilder:
        self.spec = replace(
            self.spec, tolerations=(*self.spec.tolerations, Toleration(key, operator, value))
        )
        return self

    def priority(self, value: int, created_at: float = 0.0) -> PodBuilder:
        self.spec = replace(self.spec, priority=value, created_at=created_at)
        return self

    def build(self) -> PodRequest:
        return self.spec


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_pod(uid: str) -> PodBuilder:
    return PodBuilder(uid)
