"""Kubernetes objects for a simulator spec's nodes (sim/spec.py, sim/cluster.py): what the kubelet,
the NVIDIA device plugin, GPU Feature Discovery and (optionally) the NVIDIA DRA driver would
publish for each server.

- Node: allocatable cpu, memory, pods, ephemeral-storage and `nvidia.com/gpu` (a MIG pool's
  GPUs as `nvidia.com/mig-<profile>` counts, the mixed strategy), the GFD labels, the standard
  kubernetes.io labels, the topology annotation `gpu-topology.nvidia.com/info`, Ready conditions
  and nodeInfo.
- With DRA: one ResourceSlice per node of driver `gpu.nvidia.com` (pool = node name) with a
  device per GPU (`gpu-<index>`) or MIG instance (`gpu-<index>-mig-<slot>`), attributes as the
  NVIDIA DRA driver publishes them (type, uuid, productName, architecture, driverVersion,
  pcieBusID and the standard `resource.kubernetes.io/pcieRoot`; plus index and numaNode) and
  capacity memory; and the DeviceClass `gpu.nvidia.com`. GPUs are then not advertised as
  `nvidia.com/gpu` (a node runs either the device plugin or the DRA driver).

`NodeDevices` is the node's real hardware for the kubelet and the exporter.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scheduling.core.topology import NodeTopology
from scheduling.core.topology_info import TopologyInfo
from scheduling.core.types import MIG_RESOURCE_PREFIX, GpuDevice, NodeSpec, SharingMode
from sim.cluster import build_nodes
from sim.spec import ClusterSpec

Obj = dict[str, Any]
DRIVER = "gpu.nvidia.com"
TOPOLOGY_ANNOTATION = "gpu-topology.nvidia.com/info"
KUBELET_VERSION = "v1.37.0"
DRIVER_VERSION = "550.90.7"  # as a semantic version (the exporter shows 550.90.07)
ARCHITECTURES = {"H100": "Hopper", "A100": "Ampere", "L40S": "Ada Lovelace", "T4": "Turing"}


@dataclass
class NodeDevices:
    """The GPUs a node really has, by index; MIG GPUs carry their instance layout."""

    node: str
    gpus: dict[int, GpuDevice]
    topology: NodeTopology | None = None
    unhealthy: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, spec: NodeSpec) -> NodeDevices:
        return cls(spec.name, {g.index: g for g in spec.gpus}, spec.topology)

    @classmethod
    def from_node(cls, node: Obj) -> NodeDevices:
        """A node not built from a spec: its GPUs as its allocatable and GFD labels say (MIG
        instances, which allocatable only counts, laid out on GPU 0 in profile order)."""
        meta = node["metadata"]
        name = str(meta["name"])
        labels = meta.get("labels") or {}
        allocatable = (node.get("status") or {}).get("capacity") or (
            (node.get("status") or {}).get("allocatable") or {}
        )
        model = str(labels.get("nvidia.com/gpu.product", "NVIDIA-GPU"))
        memory = int(labels.get("nvidia.com/gpu.memory", "0") or 0)
        count = int(str(allocatable.get("nvidia.com/gpu", "0")) or 0)
        gpus = {i: GpuDevice(i, model, memory, f"GPU-{name}-{i}") for i in range(count)}
        layout: list[str] = []
        for resource, value in sorted(allocatable.items()):
            if str(resource).startswith(MIG_RESOURCE_PREFIX):
                layout += [str(resource)[len(MIG_RESOURCE_PREFIX) :]] * int(str(value))
        if layout:
            index = len(gpus)
            gpus[index] = GpuDevice(
                index, model, memory, f"GPU-{name}-{index}", SharingMode.MIG, tuple(layout)
            )
        return cls(name, gpus)

    def healthy(self) -> list[GpuDevice]:
        return [g for i, g in sorted(self.gpus.items()) if i not in self.unhealthy]


@dataclass
class ClusterObjects:
    nodes: list[Obj]
    devices: dict[str, NodeDevices]
    slices: list[Obj] = field(default_factory=list)
    device_classes: list[Obj] = field(default_factory=list)


def build(spec: ClusterSpec, *, dra: bool = False) -> ClusterObjects:
    specs = build_nodes(list(spec.pools))
    objects = ClusterObjects(
        nodes=[node_object(n, dra=dra, address=k) for k, n in enumerate(specs)],
        devices={n.name: NodeDevices.of(n) for n in specs},
    )
    if dra:
        objects.slices = [resource_slice(objects.devices[n.name]) for n in specs]
        objects.device_classes = [gpu_device_class()]
    return objects


def quantity_cpu(milli: int) -> str:
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def gpu_resources(devices: NodeDevices) -> dict[str, str]:
    """What the NVIDIA device plugin advertises for the healthy GPUs (mixed MIG strategy)."""
    whole = [g for g in devices.healthy() if g.sharing is not SharingMode.MIG]
    resources = {"nvidia.com/gpu": str(len(whole))}
    instances: Counter[str] = Counter()
    for gpu in devices.healthy():
        if gpu.sharing is SharingMode.MIG:
            instances.update(gpu.mig_layout)
    for profile, count in sorted(instances.items()):
        resources[f"{MIG_RESOURCE_PREFIX}{profile}"] = str(count)
    return resources


def node_object(node: NodeSpec, *, dra: bool = False, address: int = 0) -> Obj:
    resources = {
        "cpu": quantity_cpu(node.cpu_milli),
        "memory": f"{node.memory_mib}Mi",
        "pods": "110",
        "ephemeral-storage": "3500Gi",
    }
    if not dra:
        resources.update(gpu_resources(NodeDevices.of(node)))
    labels = {
        "kubernetes.io/hostname": node.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **node.labels,
    }
    annotations = {}
    if node.topology is not None:
        annotations[TOPOLOGY_ANNOTATION] = topology_annotation(node.topology, node.name)
    ip = f"10.0.{address // 250}.{address % 250 + 2}"
    conditions = [
        _condition("MemoryPressure", "KubeletHasSufficientMemory", "sufficient memory available"),
        _condition("DiskPressure", "KubeletHasNoDiskPressure", "no disk pressure"),
        _condition("PIDPressure", "KubeletHasSufficientPID", "sufficient PID available"),
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        },
    ]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": annotations},
        "spec": {"podCIDR": f"10.244.{address}.0/24"},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": conditions,
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "Hostname", "address": node.name},
            ],
            "nodeInfo": {
                "machineID": _digest(f"machine-{node.name}")[:32],
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, node.name)),
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_URL, node.name)),
                "kubeletVersion": KUBELET_VERSION,
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "containerd://2.1.0",
                "kernelVersion": "6.8.0-60-generic",
                "osImage": "Ubuntu 24.04.2 LTS",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _condition(kind: str, reason: str, state: str) -> Obj:
    return {"type": kind, "status": "False", "reason": reason, "message": f"kubelet has {state}"}


def topology_annotation(topology: NodeTopology, node: str = "") -> str:
    """The value of `gpu-topology.nvidia.com/info` for `topology`, as the topology agent writes it
    on a real node (scheduling/core/topology_info.py): the seeds' GPUTopologyInfo keys plus the
    measured links, so simulated nodes carry their NVLink facts as real ones do."""
    ids = tuple(range(topology.gpu_count))
    return TopologyInfo(node, ids, topology, link_detail=True).to_json()


def pci_bus(index: int) -> int:
    """The PCI bus number of GPU `index` (the exporter derives the same one)."""
    return (0x18 + index * 0x11) % 0x100


def _architecture(model: str) -> str:
    return next((arch for key, arch in ARCHITECTURES.items() if key in model), "Unknown")


def resource_slice(devices: NodeDevices) -> Obj:
    entries: list[Obj] = []
    for gpu in devices.healthy():
        numa = devices.topology.gpu_numa[gpu.index] if devices.topology else 0
        switch = devices.topology.gpu_switch[gpu.index] if devices.topology else gpu.index
        common: Obj = {
            "uuid": {"string": gpu.uuid},
            "productName": {"string": gpu.model.replace("-", " ")},
            "architecture": {"string": _architecture(gpu.model)},
            "driverVersion": {"version": DRIVER_VERSION},
            "pcieBusID": {"string": f"0000:{pci_bus(gpu.index):02x}:00.0"},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{0x10 * (switch + 1):02x}"},
            "index": {"int": gpu.index},
            "numaNode": {"int": numa},
        }
        if gpu.sharing is SharingMode.MIG:
            for slot, profile in enumerate(gpu.mig_layout):
                memory = _profile_memory_gib(profile)
                entries.append(
                    {
                        "name": f"gpu-{gpu.index}-mig-{slot}",
                        "attributes": {
                            "type": {"string": "mig"},
                            "profile": {"string": profile},
                            "parentUUID": {"string": gpu.uuid},
                            **{k: v for k, v in common.items() if k != "uuid"},
                            "uuid": {"string": f"MIG-{gpu.uuid}-{slot}"},
                        },
                        "capacity": {"memory": {"value": f"{memory}Gi"}},
                    }
                )
            continue
        entries.append(
            {
                "name": f"gpu-{gpu.index}",
                "attributes": {"type": {"string": "gpu"}, **common},
                "capacity": {"memory": {"value": f"{gpu.memory_mib}Mi"}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{devices.node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": devices.node,
            "pool": {"name": devices.node, "generation": 1, "resourceSliceCount": 1},
            "devices": entries,
        },
    }


def _profile_memory_gib(profile: str) -> int:
    """`3g.40gb` -> 40."""
    try:
        return int(profile.split(".")[1].split("+")[0].removesuffix("gb"))
    except (IndexError, ValueError):
        return 0


def gpu_device_class() -> Obj:
    """The DeviceClass the NVIDIA DRA driver's chart installs for whole GPUs."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{DRIVER}' && "
                        f"device.attributes['{DRIVER}'].type == 'gpu'"
                    }
                }
            ]
        },
    }
