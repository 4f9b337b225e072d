"""Kubernetes objects as the API server returns them (JSON dicts), for the fake API and tests."""

from __future__ import annotations

import json
from typing import Any

Obj = dict[str, Any]

H100 = "NVIDIA-H100-80GB-HBM3"


def node(
    name: str,
    *,
    gpus: int = 8,
    cpu: str = "128",
    memory: str = "1024Gi",
    product: str = H100,
    topology: dict[str, Any] | None = None,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    taints: list[Obj] | None = None,
    unschedulable: bool = False,
) -> Obj:
    """A GPU node with GFD labels and, by default, the seeds' topology annotation (two NUMA
    nodes, two PCIe switches per NUMA node)."""
    if topology is None and gpus:
        ids = list(range(gpus))
        half = max(1, gpus // 2)
        quarter = max(1, gpus // 4)
        topology = {
            "gpuIds": ids,
            "numaNode": {str(i): i // half for i in ids},
            "pcieSwitch": {str(i): i // quarter for i in ids},
            "totalGpus": gpus,
        }
    meta: Obj = {
        "name": name,
        "labels": {
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.product": product,
            "nvidia.com/gpu.count": str(gpus),
            "nvidia.com/gpu.memory": "81559",
            **(labels or {}),
        },
    }
    if topology is not None:
        meta["annotations"] = {"gpu-topology.nvidia.com/info": json.dumps(topology)}
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "nvidia.com/gpu": str(gpus)}
    resources.update(allocatable or {})
    spec: Obj = {"podCIDR": "10.244.1.0/24"}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    *,
    namespace: str = "ml-team",
    scheduler: str = "gpu-topology-scheduler",
    gpus: int = 0,
    cpu: str = "4",
    memory: str = "16Gi",
    extra: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    node_name: str = "",
    phase: str = "Pending",
    gates: list[str] | None = None,
    node_selector: dict[str, str] | None = None,
) -> Obj:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)  # extended resources: requests default to limits
    for key, value in (extra or {}).items():
        limits[key] = value
    container: Obj = {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}
    container["resources"] = {"requests": requests, **({"limits": limits} if limits else {})}
    spec: Obj = {"schedulerName": scheduler, "containers": [container], "priority": 0}
    if node_name:
        spec["nodeName"] = node_name
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    if node_selector:
        spec["nodeSelector"] = node_selector
    meta: Obj = {"name": name, "namespace": namespace}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": spec,
        "status": {"phase": phase},
    }


def nrt(name: str, zones: list[tuple[int, int]], *, version: str = "v1alpha2") -> Obj:
    """A NodeResourceTopology object: zones of (cpus, gpus), NUMA distance 10 / 21."""
    doc: Obj = {
        "apiVersion": f"topology.node.k8s.io/{version}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": name},
        "topologyPolicies": ["SingleNUMANodeContainerLevel"],
        "zones": [
            {
                "name": f"node-{i}",
                "type": "Node",
                "costs": [
                    {"name": f"node-{j}", "value": 10 if i == j else 21} for j in range(len(zones))
                ],
                "resources": [
                    {"name": "cpu", "capacity": str(cpus), "allocatable": str(cpus)},
                    {"name": "nvidia.com/gpu", "capacity": str(gpus), "allocatable": str(gpus)},
                ],
            }
            for i, (cpus, gpus) in enumerate(zones)
        ],
    }
    if version == "v1alpha2":
        doc["attributes"] = [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "container"},
        ]
    return doc
