"""A simulated dcgm-exporter for every node of the simulated Kubernetes: the exposition of
telemetry/exposition.py with `Hostname` = node name and the `pod`, `namespace`, `container`
(and `pod_uid`) labels of the pods that really hold each GPU, as the kubelets assigned them,
utilization following each pod's profile (sim/gpu_states.py). A GPU made unhealthy reports its
XID error; a removed GPU is gone from the exposition. Served on `/metrics`."""

from __future__ import annotations

from datetime import datetime

from scheduling.core.types import SharingMode
from sim.gpu_states import mig_instance_state, whole_gpu_states
from sim.kubernetes.cluster import pci_bus
from sim.kubernetes.kubelet import Kubelets
from sim.kubernetes.resources import core
from telemetry.exposition import GpuState, render_exposition

NODES = core("nodes")


class Exporter:
    def __init__(self, kubelets: Kubelets) -> None:
        self.kubelets = kubelets

    def states(self, now: datetime | None = None) -> list[GpuState]:
        kubelets = self.kubelets
        now = now or kubelets.clock()
        states: list[GpuState] = []
        with kubelets.registry.lock:
            names = [n["metadata"]["name"] for n in kubelets.registry.storage.items(NODES)]
            for node in names:
                if kubelets.only is not None and node not in kubelets.only:
                    continue
                holders = kubelets.holders_by_gpu(node, now)
                runs = {r.key: r for r in kubelets.running(node)}
                mig_holders = {
                    slot: kubelets.holder(runs[key], now)  # slot: (gpu, instance)
                    for key, holding in kubelets.holdings(node).items()
                    if key in runs
                    for slot in holding.mig
                }
                for index, gpu in sorted(kubelets.devices(node).gpus.items()):
                    base = GpuState(
                        hostname=node,
                        gpu=index,
                        uuid=gpu.uuid,
                        model_name=gpu.model.replace("-", " "),
                        pci_bus_id=f"00000000:{pci_bus(index):02X}:00.0",
                        xid_last=float(kubelets.xid.get((node, index), 0)),
                    )
                    if gpu.sharing is SharingMode.MIG:
                        states += [
                            mig_instance_state(
                                base, gpu.memory_mib, profile, slot, mig_holders.get((index, slot))
                            )
                            for slot, profile in enumerate(gpu.mig_layout)
                        ]
                    else:
                        found = [h for h, _ in holders.get(index, [])]
                        states += whole_gpu_states(base, gpu.memory_mib, found)
        return states

    def render(self, now: datetime | None = None) -> str:
        return render_exposition(self.states(now))
