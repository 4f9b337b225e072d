"""Kueue's objects written into the simulated cluster through the official client, as an admin's
`kubectl apply` would, and the one cycle on the Kubernetes side in either admission mode."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import gpusched_cycle

GROUP = "kueue.x-k8s.io"
NS = "ml-team"
A100 = "NVIDIA-A100-SXM4-80GB"


def cycle(fake: SimulatedKubernetes, **options: Any) -> SchedulingCycle:
    """The cycle with gpusched's profile; Kueue's objects listed every cycle."""
    return gpusched_cycle(fake, list_interval_s=0, **options)


def custom(fake: SimulatedKubernetes) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(fake.api_client())


def create(
    fake: SimulatedKubernetes, plural: str, doc: dict[str, Any], version: str = "v1beta2"
) -> None:
    body = {"apiVersion": f"{GROUP}/{version}", **doc}
    namespace = doc["metadata"].get("namespace")
    if namespace:
        fake.add_namespace(namespace)
        custom(fake).create_namespaced_custom_object(GROUP, version, namespace, plural, body)
    else:
        custom(fake).create_cluster_custom_object(GROUP, version, plural, body)


def delete(fake: SimulatedKubernetes, plural: str, name: str, namespace: str = "") -> None:
    if namespace:
        custom(fake).delete_namespaced_custom_object(GROUP, "v1beta2", namespace, plural, name)
    else:
        custom(fake).delete_cluster_custom_object(GROUP, "v1beta2", plural, name)


def flavor(name: str = "h100", product: str = objects.H100) -> dict[str, Any]:
    return {
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": product}},
    }


def cluster_queue(
    name: str = "team", gpus: int = 4, flavor_name: str = "h100", **spec: Any
) -> dict[str, Any]:
    return {
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": flavor_name,
                            "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                        }
                    ],
                }
            ],
            **spec,
        },
    }


def local_queue(name: str = "team", cq: str = "team", namespace: str = NS) -> dict[str, Any]:
    return {
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cq},
    }


def queued_pod(
    name: str, gpus: int, *, queue: str = "team", gates: list[str] | None = None, **kwargs: Any
) -> dict[str, Any]:
    doc = objects.pod(name, scheduler="gpusched", gpus=gpus, gates=gates, **kwargs)
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    return doc


def node_of(fake: SimulatedKubernetes, name: str) -> str | None:
    return fake.pod(NS, name)["spec"].get("nodeName")


def scheduled_message(fake: SimulatedKubernetes, name: str) -> str:
    conditions = fake.pod(NS, name)["status"].get("conditions") or []
    return next((c["message"] for c in conditions if c["type"] == "PodScheduled"), "")
