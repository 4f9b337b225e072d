"""Topology across nodes on the Kubernetes side, as Kueue's TAS is set up: a Topology and a
ResourceFlavor naming it created in the cluster (through the official client), a pod group whose
pods carry kueue.x-k8s.io/podset-required-topology; the one cycle binds the whole group inside
one rack (the tightest that holds it), and a group no rack holds waits with the reason on its
pods' PodScheduled condition."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.models import Topology
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.kueue_cluster import (
    NS,
    cluster_queue,
    create,
    cycle,
    local_queue,
    node_of,
    queued_pod,
    scheduled_message,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def tas_objects(fake: SimulatedKubernetes, version: str) -> None:
    create(
        fake,
        "topologies",
        {
            "kind": "Topology",
            "metadata": {"name": "default"},
            "spec": {
                "levels": [
                    {"nodeLabel": BLOCK},
                    {"nodeLabel": RACK},
                    {"nodeLabel": "kubernetes.io/hostname"},
                ]
            },
        },
        version=version,
    )
    create(
        fake,
        "resourceflavors",
        {
            "kind": "ResourceFlavor",
            "metadata": {"name": "tas"},
            "spec": {"topologyName": "default"},
        },
    )
    create(fake, "clusterqueues", cluster_queue(gpus=64, flavor_name="tas"))
    create(fake, "localqueues", local_queue())


def group_pod(group: str, k: int, size: int, level: str) -> dict[str, Any]:
    doc = queued_pod(f"{group}-{k}", 8, annotations={
        "kueue.x-k8s.io/pod-group-total-count": str(size), REQUIRED: level,
    })  # fmt: skip
    doc["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
    return doc


@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1"])
def test_a_group_requiring_a_rack_is_bound_in_the_tightest_rack_or_waits_naming_it(
    fake: SimulatedKubernetes, version: str
) -> None:
    for rack, count in (("r1", 3), ("r2", 2)):
        for k in range(count):
            fake.add_node(
                objects.node(
                    f"{rack}-{k}",
                    labels={BLOCK: "b1", RACK: rack, "kubernetes.io/hostname": f"{rack}-{k}"},
                )
            )
    tas_objects(fake, version)
    for k in range(2):
        fake.add_pod(group_pod("fits", k, 2, RACK))
    for k in range(4):
        fake.add_pod(group_pod("too-big", k, 4, RACK))
    sched = cycle(fake)
    for _ in range(3):
        sched.run_once()

    assert Topology.objects.get().levels[1] == RACK
    assert {node_of(fake, f"fits-{k}") for k in range(2)} == {"r2-0", "r2-1"}
    assert all(node_of(fake, f"too-big-{k}") is None for k in range(4))
    message = scheduled_message(fake, "too-big-0")
    assert f"no rack ({RACK}) holds 4 pods x 8 GPUs (32 GPUs)" in message, message
    assert "the largest, b1/r1, has room for 3 pods (24 free GPUs)" in message
    assert fake.pod(NS, "fits-0")["status"]["phase"] in ("Pending", "Running")
