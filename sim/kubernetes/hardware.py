"""Node changes for tests, as the NVIDIA device plugin (or DRA driver) reports them: a GPU made
unhealthy by an XID error (allocatable `nvidia.com/gpu` drops, capacity stays; the exporter
shows the XID), a GPU removed (both drop; gone from the exposition), GPUs added, CPU changed.
With DRA the node's ResourceSlice lists the healthy devices and its pool generation moves on.
Pods already holding a GPU that went away keep running, as on a real node."""

from __future__ import annotations

from scheduling.core.types import GpuDevice, SharingMode
from sim.kubernetes import cluster
from sim.kubernetes.cluster import NodeDevices
from sim.kubernetes.kubelet import Kubelets
from sim.kubernetes.meta import clone
from sim.kubernetes.resources import core, named

NODES = core("nodes")
SLICES = named("resource.k8s.io/resourceslices")


class Hardware:
    def __init__(self, kubelets: Kubelets) -> None:
        self.kubelets = kubelets
        self.registry = kubelets.registry

    def set_gpu_health(self, node: str, index: int, healthy: bool, *, xid: int = 48) -> None:
        """48: a double-bit ECC error, which the device plugin marks Unhealthy."""
        devices = self.kubelets.devices(node)
        if healthy:
            devices.unhealthy.discard(index)
            self.kubelets.xid.pop((node, index), None)
        else:
            devices.unhealthy.add(index)
            self.kubelets.xid[(node, index)] = xid
        self._publish(node)

    def remove_gpu(self, node: str, index: int) -> None:
        devices = self.kubelets.devices(node)
        devices.gpus.pop(index, None)
        devices.unhealthy.discard(index)
        self.kubelets.xid.pop((node, index), None)
        self._publish(node)

    def add_gpus(self, node: str, count: int, *, model: str = "", memory_mib: int = 0) -> list[int]:
        devices = self.kubelets.devices(node)
        template = next(iter(devices.gpus.values()), None)
        sharing = template.sharing if template else SharingMode.EXCLUSIVE
        start = max(devices.gpus, default=-1) + 1
        for index in range(start, start + count):
            devices.gpus[index] = GpuDevice(
                index=index,
                model=model or (template.model if template else "NVIDIA-GPU"),
                memory_mib=memory_mib or (template.memory_mib if template else 0),
                uuid=f"GPU-{node}-{index}",
                sharing=SharingMode.EXCLUSIVE if sharing is SharingMode.MIG else sharing,
            )
        self._publish(node)
        return list(range(start, start + count))

    def set_cpu(self, node: str, cpu_milli: int) -> None:
        cpu = cluster.quantity_cpu(cpu_milli)
        self._update_node(node, {"cpu": cpu}, {"cpu": cpu})

    def _publish(self, node: str) -> None:
        devices = self.kubelets.devices(node)
        with self.registry.lock:
            for found in self.registry.storage.items(SLICES):
                spec = found.get("spec") or {}
                if spec.get("nodeName") != node or spec.get("driver") != cluster.DRIVER:
                    continue
                updated = clone(found)
                updated["spec"]["devices"] = cluster.resource_slice(devices)["spec"]["devices"]
                updated["spec"]["pool"]["generation"] = int(spec["pool"].get("generation", 0)) + 1
                self.registry.storage.put(SLICES, updated)
            capacity = (self.registry.read(NODES, "", node).get("status") or {}).get(
                "capacity"
            ) or {}
            if any(str(k).startswith("nvidia.com/") for k in capacity):  # the device plugin's node
                present = NodeDevices(node, devices.gpus)
                self._update_node(
                    node, cluster.gpu_resources(devices), cluster.gpu_resources(present)
                )

    def _update_node(
        self, node: str, allocatable: dict[str, str], capacity: dict[str, str]
    ) -> None:
        with self.registry.lock:
            obj = clone(self.registry.read(NODES, "", node))
            status = obj.setdefault("status", {})
            status.setdefault("allocatable", {}).update(allocatable)
            status.setdefault("capacity", {}).update(capacity)
            self.registry.storage.put(NODES, obj)
