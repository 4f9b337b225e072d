"""Consolidation through the Kubernetes side, against the simulated API with the official client
(issue 37): a 2 x 8-GPU pod group whose reservation cannot complete within its horizon moves the
batch pods off two nodes through the Eviction API (the path preemption takes), waits for them to
terminate, then binds; the online pod stays; the cluster's ClusterQueue annotated
gpusched.io/consolidation: Never keeps its pods in place."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.models import Pod
from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import Clock
from tests.kube.kueue_cluster import (
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
NODES = ("gpu-a", "gpu-b", "gpu-c")


def fragmented(fake: SimulatedKubernetes, clock: Clock, never: bool = False) -> SchedulingCycle:
    """Three 8-GPU nodes: one holds the online pod `serve` alone, the others 2 and 5 running
    batch pods: 7 + 6 + 3 GPUs free, no node empty."""
    for name in NODES:
        fake.add_node(objects.node(name))
    queue = cluster_queue(gpus=24)
    if never:
        queue["metadata"]["annotations"] = {"gpusched.io/consolidation": "Never"}
    create(fake, "resourceflavors", flavor())
    create(fake, "clusterqueues", queue)
    create(fake, "localqueues", local_queue())
    fake.add_pod(queued_pod("serve", 1, annotations={"gpusched.io/service-class": "online"}))
    for k in range(23):
        fake.add_pod(queued_pod(f"small-{k}", 1))
    sched = cycle(fake, clock=clock)
    sched.reservation_horizon_s = 60.0
    for _ in range(3):
        sched.run_once()
    where = {f"small-{k}": node_of(fake, f"small-{k}") for k in range(23)}
    serve = node_of(fake, "serve")
    assert serve is not None and None not in where.values()
    others = sorted(set(NODES) - {serve})
    keep = {serve: 0, others[0]: 2, others[1]: 5}
    for node, left in keep.items():
        for name in sorted(n for n, at in where.items() if at == node)[left:]:
            fake.delete_pod(NS, name)  # finished
    for name in where:
        if name in {p["metadata"]["name"] for p in fake.objects("pods", NS)}:
            fake.update_pod(NS, name, lambda p: p["status"].update(phase="Running"))
    return sched


def gang(fake: SimulatedKubernetes) -> None:
    for k in range(2):
        doc: dict[str, Any] = queued_pod(f"train-{k}", 8)
        doc["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"] = "train"
        doc["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
        fake.add_pod(doc)


def terminating(fake: SimulatedKubernetes) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in fake.objects("pods", NS)
        if p["metadata"].get("deletionTimestamp")
    )


def test_a_pod_group_beyond_its_horizon_moves_batch_pods_through_the_eviction_api(fake) -> None:
    clock = Clock()
    sched = fragmented(fake, clock)
    gang(fake)
    clock.advance(30)
    sched.run_once()
    clock.advance(11)  # past the group's backoff
    assert sched.run_once().reserved == 1
    clock.advance(70)  # held 70 s > 60 s: the reservation cannot complete
    report = sched.run_once()
    assert report.preempted == 7
    moved = terminating(fake)
    assert len(moved) == 7 and "serve" not in moved  # graceful deletions, never the online pod
    notes = [e["note"] for e in fake.events if e["reason"] == "Preempted"]
    assert len(notes) == 7 and all(n.startswith("Consolidated") for n in notes)
    assert Pod.objects.get(kube__name="serve").phase != Pod.Phase.TERMINATING
    # The group waits while they terminate, and moves nothing more meanwhile.
    clock.advance(11)
    assert sched.run_once().preempted == 0
    assert [node_of(fake, f"train-{k}") for k in range(2)] == [None, None]
    for name in moved:
        fake.delete_pod(NS, name)  # the kubelet finished their termination
    for _ in range(3):
        clock.advance(11)
        sched.run_once()
    placed = {node_of(fake, f"train-{k}") for k in range(2)}
    assert None not in placed and node_of(fake, "serve") not in placed


def test_a_cluster_queue_annotated_never_keeps_its_pods_in_place(fake) -> None:
    clock = Clock()
    sched = fragmented(fake, clock, never=True)
    gang(fake)
    clock.advance(30)
    sched.run_once()
    clock.advance(11)
    assert sched.run_once().reserved == 1
    clock.advance(70)
    assert sched.run_once().preempted == 0
    assert terminating(fake) == []
