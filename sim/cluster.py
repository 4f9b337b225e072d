"""Simulated nodes from node pools: a real `nvidia-smi topo -m` matrix, a GPU model, CPU and memory,
and the GPU Feature Discovery labels a real node would carry."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from scheduling.core.topology import NodeTopology, parse_nvidia_smi_topo
from scheduling.core.types import GpuDevice, NodeSpec, SharingMode

TOPOLOGY_DIR = Path(__file__).resolve().parents[1] / "data" / "topologies"


@dataclass(frozen=True, slots=True)
class NodePool:
    name: str
    count: int
    topology: str  # file stem in data/topologies, e.g. "dgx-h100"
    gpu_model: str
    gpu_memory_mib: int
    cpu_milli: int
    memory_mib: int
    sharing: SharingMode = SharingMode.TIME_SLICING
    mig_layout: tuple[str, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)


# The servers of data/topologies with their real CPU and memory sizes (DGX H100: 2x 56-core Xeon
# 8480C, 2 TiB; DGX A100: 2x 64-core EPYC, 2 TiB; PCIe servers: 2x 32 cores, 1 TiB; T4 node: 1x 26
# cores, 256 GiB).
PRESETS: dict[str, NodePool] = {
    "dgx-h100": NodePool(
        "dgx-h100", 0, "dgx-h100", "NVIDIA-H100-80GB-HBM3", 81_559, 224_000, 2 << 20
    ),
    "dgx-a100": NodePool(
        "dgx-a100", 0, "dgx-a100", "NVIDIA-A100-SXM4-80GB", 81_920, 256_000, 2 << 20
    ),
    "pcie-8gpu-2socket": NodePool(
        "pcie-8gpu-2socket", 0, "pcie-8gpu-2socket", "NVIDIA-L40S", 46_068, 128_000, 1 << 20
    ),
    "pcie-8gpu-nvbridge": NodePool(
        "pcie-8gpu-nvbridge",
        0,
        "pcie-8gpu-nvbridge",
        "NVIDIA-A100-PCIE-80GB",
        81_920,
        128_000,
        1 << 20,
    ),
    "t4-2gpu": NodePool("t4-2gpu", 0, "t4-2gpu", "Tesla-T4", 15_360, 52_000, 256 << 10),
}


@cache
def load_topology(name: str) -> NodeTopology:
    path = TOPOLOGY_DIR / f"{name}.topo"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in TOPOLOGY_DIR.glob("*.topo")))
        raise ValueError(f"unknown topology {name!r} (known: {known})")
    return parse_nvidia_smi_topo(path.read_text())


def gfd_labels(pool: NodePool, gpu_count: int) -> dict[str, str]:
    """The labels GPU Feature Discovery puts on such a node (wire-formats.md §5)."""
    labels = {
        "nvidia.com/gpu.product": pool.gpu_model,
        "nvidia.com/gpu.count": str(gpu_count),
        "nvidia.com/gpu.memory": str(pool.gpu_memory_mib),
        "nvidia.com/gpu.sharing-strategy": "none"
        if pool.sharing in (SharingMode.EXCLUSIVE, SharingMode.MIG)
        else pool.sharing.value,
        "gpusched.io/pool": pool.name,
    }
    if pool.sharing is SharingMode.MIG:
        labels["nvidia.com/mig.strategy"] = "mixed"
    return {**labels, **pool.labels}


def build_nodes(pools: list[NodePool]) -> list[NodeSpec]:
    nodes = []
    for pool in pools:
        topology = load_topology(pool.topology)
        for k in range(pool.count):
            name = f"{pool.name}-{k:04d}"
            gpus = tuple(
                GpuDevice(
                    index=i,
                    model=pool.gpu_model,
                    memory_mib=pool.gpu_memory_mib,
                    uuid=f"GPU-{name}-{i}",
                    sharing=pool.sharing,
                    mig_layout=pool.mig_layout,
                )
                for i in range(topology.gpu_count)
            )
            nodes.append(
                NodeSpec(
                    name=name,
                    cpu_milli=pool.cpu_milli,
                    memory_mib=pool.memory_mib,
                    gpus=gpus,
                    topology=topology,
                    labels=gfd_labels(pool, len(gpus)),
                )
            )
    return nodes


# Shares of each server type in the "mixed" synthetic cluster.
MIXED_SHARES = (
    ("dgx-h100", 0.4),
    ("dgx-a100", 0.3),
    ("pcie-8gpu-2socket", 0.2),
    ("pcie-8gpu-nvbridge", 0.1),
)


def synthetic_pools(nodes: int, topology: str) -> list[NodePool]:
    """`nodes` servers of one preset, or of the mixed fleet."""
    if topology != "mixed":
        if topology not in PRESETS:
            raise ValueError(f"unknown topology {topology!r} (known: mixed, {', '.join(PRESETS)})")
        return [replace(PRESETS[topology], count=nodes)]
    counts = [int(nodes * share) for _, share in MIXED_SHARES]
    counts[0] += nodes - sum(counts)
    return [
        replace(PRESETS[name], count=n) for (name, _), n in zip(MIXED_SHARES, counts, strict=True)
    ]
