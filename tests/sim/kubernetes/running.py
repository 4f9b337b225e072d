"""A two-node simulated cluster (one DGX H100, one DGX A100 in MIG) for the kubelet and exporter
tests, and pods bound to it through the API."""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from sim.kubernetes.launch import SimulatedCluster
from sim.spec import parse_spec
from tests.sim.kubernetes.helpers import Clock, client_for, pod

SPEC = parse_spec(
    {
        "nodePools": [
            {"name": "h100", "count": 1, "topology": "dgx-h100"},
            {
                "name": "mig",
                "count": 1,
                "topology": "dgx-a100",
                "sharing": "mig",
                "migLayout": ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
            },
        ]
    }
)
H100, MIG = "h100-0000", "mig-0000"


def start(clock: Clock, **options: Any) -> SimulatedCluster:
    found = SimulatedCluster.from_spec(SPEC, clock=clock, **options).start()
    found.kube.add_namespace("ml-team")
    return found


def api(sim: SimulatedCluster) -> Any:
    return client_for(client.CoreV1Api, sim.kube)


def run(sim: SimulatedCluster, name: str, node: str, **spec: Any) -> Any:
    """Create the pod and bind it to `node` through the API."""
    core = api(sim)
    core.create_namespaced_pod("ml-team", pod(name, **spec))
    target = client.V1ObjectReference(kind="Node", name=node)
    binding = client.V1Binding(metadata=client.V1ObjectMeta(name=name), target=target)
    # The raw 201 Status (the client cannot read it as a V1Binding), read so that the connection
    # goes back to the pool.
    response = core.create_namespaced_pod_binding(name, "ml-team", binding, _preload_content=False)
    assert (response.status, json.loads(response.data)["status"]) == (201, "Success")
    return core


def limited(limits: dict[str, str]) -> list[dict[str, Any]]:
    """One container with these resource limits."""
    return [{"name": "main", "image": "x", "resources": {"limits": limits}}]
