"""Job test helpers: Job bodies, binding a Job's pods as a scheduler would, ending them as a
kubelet would report, and reading a Job's conditions."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from sim.kubernetes.kubelet import DURATION
from sim.kubernetes.launch import SimulatedCluster
from tests.sim.kubernetes.helpers import client_for
from tests.sim.kubernetes.running import H100

NAMESPACE = "ml-team"


def job(name: str, *, duration_s: int = 600, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    """A batch/v1 Job whose pods run `duration_s` simulated seconds on `gpus` GPUs."""
    template: dict[str, Any] = {
        "metadata": {"annotations": {DURATION: str(duration_s)}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "train",
                    "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }
    return {"metadata": {"name": name}, "spec": {"template": template, **spec}}


def batch(sim: SimulatedCluster) -> Any:
    return client_for(client.BatchV1Api, sim.kube)


def pods_of(sim: SimulatedCluster, name: str) -> list[dict[str, Any]]:
    """The Job's pods (by the job-name label the controller puts on them)."""
    return [
        p
        for p in sim.kube.objects("pods", NAMESPACE)
        if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name
    ]


def bind_all(sim: SimulatedCluster, node: str = H100) -> list[str]:
    """Bind every pending pod to `node` through the Binding API, as a scheduler would."""
    core = client_for(client.CoreV1Api, sim.kube)
    bound = []
    for pod in sim.kube.objects("pods", NAMESPACE):
        meta = pod["metadata"]
        if pod["spec"].get("nodeName") or meta.get("deletionTimestamp"):
            continue
        target = client.V1ObjectReference(kind="Node", name=node)
        body = client.V1Binding(metadata=client.V1ObjectMeta(name=meta["name"]), target=target)
        response = core.create_namespaced_pod_binding(
            meta["name"], NAMESPACE, body, _preload_content=False
        )
        assert json.loads(response.data)["status"] == "Success"
        bound.append(meta["name"])
    return bound


def fail(sim: SimulatedCluster, name: str) -> None:
    """The pod's kubelet reports it failed (its container exited 1)."""

    def change(pod: dict[str, Any]) -> None:
        pod["status"]["phase"] = "Failed"
        for container in pod["status"].get("containerStatuses") or []:
            container["state"] = {"terminated": {"exitCode": 1, "reason": "Error"}}

    sim.kube.update_pod(NAMESPACE, name, change)


def conditions(sim: SimulatedCluster, name: str) -> list[tuple[str, str, str]]:
    found = sim.kube.get_object("jobs", NAMESPACE, name).get("status", {}).get("conditions", [])
    return [(c["type"], c["status"], c.get("reason", "")) for c in found]


def events(sim: SimulatedCluster, name: str) -> list[tuple[str, str]]:
    """(reason, message) of the core/v1 events about the Job, oldest first."""
    return [
        (e["reason"], e.get("note", ""))
        for e in sim.kube.events
        if e.get("regarding", {}).get("kind") == "Job" and e["regarding"]["name"] == name
    ]
