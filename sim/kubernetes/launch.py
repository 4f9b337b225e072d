"""A whole simulated Kubernetes cluster from a simulator spec: the API server with the spec's
nodes (and, with `dra`, their ResourceSlices and the gpu.nvidia.com DeviceClass), kubelets for
them, the dcgm-exporter, and the hardware knobs. The `fakekube` command runs one on the wall
clock x speed; tests and experiments build one on their own clock and call `run_once()`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sim.kubernetes import cluster
from sim.kubernetes.exporter import Exporter
from sim.kubernetes.hardware import Hardware
from sim.kubernetes.kubelet import KubeletReport, Kubelets
from sim.kubernetes.simulated import SimulatedKubernetes
from sim.spec import ClusterSpec


class SpeedClock:
    """Simulated time running `speed` times faster than the wall clock, from `start`."""

    def __init__(self, speed: float = 1.0, *, wall: Callable[[], datetime] | None = None) -> None:
        self.speed = speed
        self.wall = wall or (lambda: datetime.now(UTC))
        self.start = self.wall()

    def __call__(self) -> datetime:
        return self.start + (self.wall() - self.start) * self.speed


@dataclass
class SimulatedCluster:
    kube: SimulatedKubernetes
    kubelets: Kubelets
    exporter: Exporter
    hardware: Hardware
    objects: cluster.ClusterObjects

    @classmethod
    def from_spec(
        cls,
        spec: ClusterSpec,
        *,
        clock: Callable[[], datetime],
        dra: bool = False,
        honour_gpu_ids: bool = False,
        port: int = 0,
        watch_linger_s: float | None = None,
        record: bool = False,
    ) -> SimulatedCluster:
        kube = SimulatedKubernetes(
            clock=clock, port=port, watch_linger_s=watch_linger_s, record=record
        )
        objects = cluster.build(spec, dra=dra)
        for node in objects.nodes:
            kube.put("nodes", node)
        for found in objects.slices:
            kube.put("resourceslices", found)
        for device_class in objects.device_classes:
            kube.put("deviceclasses", device_class)
        for tenant in spec.tenants:  # as an admin makes each tenant's namespace
            kube.add_namespace(tenant.name)
        kubelets = Kubelets(
            kube.registry, clock=clock, devices=objects.devices, honour_gpu_ids=honour_gpu_ids
        )
        return cls(kube, kubelets, Exporter(kubelets), Hardware(kubelets), objects)

    def start(self) -> SimulatedCluster:
        self.kube.start()
        return self

    def close(self) -> None:
        self.kube.close()

    def run_once(self) -> KubeletReport:
        """The kubelets' step, then the controllers' (Job deadlines and back-offs)."""
        report = self.kubelets.run_once()
        self.kube.jobs.tick()
        return report
