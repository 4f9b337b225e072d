"""Beside Kueue (`runkube --admission kueue`): Kueue admits, gpusched places. Kueue's webhook gates
the pods it manages and its pod controller ungates them once admitted, merging the flavor's node
labels into spec.nodeSelector in the same patch (kubernetes-sigs/kueue
pkg/controller/jobs/pod/pod_controller.go); this test plays Kueue's part through the official
client."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from scheduling.models import ClusterQueue, QueueSource, Workload
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.kueue_cluster import (
    A100,
    NS,
    cluster_queue,
    create,
    cycle,
    flavor,
    local_queue,
    node_of,
    queued_pod,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
GATE = "kueue.x-k8s.io/admission"


def kueue_admits(fake: SimulatedKubernetes, name: str, node_labels: dict[str, str]) -> None:
    """What Kueue does on admission: one update that removes its gate and adds the flavor's
    node labels to the node selector (allowed while the pod is gated, KEP-3838)."""
    core = client.CoreV1Api(fake.api_client())
    pod: Any = core.read_namespaced_pod(name, NS)
    pod.spec.scheduling_gates = [g for g in pod.spec.scheduling_gates if g.name != GATE] or None
    pod.spec.node_selector = {**(pod.spec.node_selector or {}), **node_labels}
    core.replace_namespaced_pod(name, NS, pod)


def two_models(fake: SimulatedKubernetes) -> None:
    fake.add_node(objects.node("gpu-h100"))
    fake.add_node(objects.node("gpu-a100", product=A100))


def test_gated_pods_are_left_alone_and_placed_where_kueues_node_selector_says_once_ungated(
    fake: SimulatedKubernetes,
) -> None:
    two_models(fake)
    # Kueue's objects are in the cluster, and this quota would hold the pod back if gpusched
    # read it: beside Kueue it reads none of them.
    create(fake, "resourceflavors", flavor("a100", A100))
    create(fake, "clusterqueues", cluster_queue(gpus=0, flavor_name="a100"))
    create(fake, "localqueues", local_queue())
    for name in ("train", "tune"):
        pod = queued_pod(name, 4, gates=[GATE])
        # A WorkloadPriorityClass only Kueue knows: it orders Kueue's queue, not the pod.
        pod["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "kueue-only"
        pod["spec"]["priority"] = 7
        fake.add_pod(pod)
    sched = cycle(fake, admission="kueue")
    sched.run_once()
    sched.run_once()

    assert node_of(fake, "train") is None and node_of(fake, "tune") is None
    assert not Workload.objects.exists()  # not even mirrored: not ours yet
    assert not [e for e in fake.events if e["regarding"]["name"] in ("train", "tune")]
    assert not fake.pod(NS, "train")["status"].get("conditions")
    assert not ClusterQueue.objects.exists()
    assert QueueSource.objects.get().kind == "kueue"

    # Kueue admits them with different flavors. Both would fit on either node, and gpusched packs
    # pods of one size together: each lands where its node selector says.
    kueue_admits(fake, "train", {"nvidia.com/gpu.product": A100})
    kueue_admits(fake, "tune", {"nvidia.com/gpu.product": objects.H100})
    report = sched.run_once()
    assert report.admitted == 2 and report.bound == 2
    assert node_of(fake, "train") == "gpu-a100"
    assert node_of(fake, "tune") == "gpu-h100"
    workload = Workload.objects.get(pods__name="train")
    assert (workload.priority, workload.priority_class_name) == (7, "")
    assert workload.cluster_queue is None  # the quota was Kueue's to reserve


def test_a_kueue_pod_group_is_placed_all_or_nothing_once_kueue_ungates_it(
    fake: SimulatedKubernetes,
) -> None:
    two_models(fake)
    sched = cycle(fake, admission="kueue")
    for group, gpus in (("small", 4), ("big", 8)):
        for k in range(2):
            pod = queued_pod(
                f"{group}-{k}",
                gpus,
                gates=[GATE],
                annotations={"kueue.x-k8s.io/pod-group-total-count": "2"},
            )
            pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = group
            fake.add_pod(pod)
    sched.run_once()
    kueue_admits(fake, "small-0", {"nvidia.com/gpu.product": A100})
    sched.run_once()
    assert node_of(fake, "small-0") is None  # its group is not all ungated yet

    kueue_admits(fake, "small-1", {"nvidia.com/gpu.product": A100})
    sched.run_once()
    assert [node_of(fake, f"small-{k}") for k in range(2)] == ["gpu-a100", "gpu-a100"]

    # Two whole-node workers on A100s, of which one is free: neither goes (a gang is placed whole
    # or not at all, and the free H100 node is not the flavor Kueue chose).
    fake.add_node(objects.node("gpu-a100-2", product=A100))
    for k in range(2):
        kueue_admits(fake, f"big-{k}", {"nvidia.com/gpu.product": A100})
    sched.run_once()
    sched.run_once()
    assert [node_of(fake, f"big-{k}") for k in range(2)] == [None, None]
    (workload,) = Workload.objects.filter(pods__name="big-0").distinct()
    assert workload.pods.count() == 2 and workload.state == Workload.State.ADMITTED
