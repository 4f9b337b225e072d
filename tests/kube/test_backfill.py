"""Reservations through the scheduling cycle on the Kubernetes side (issue 18): the starvation
case, one 8-GPU node, a 2-pod x 2-GPU gang at the head of the queue and 1-GPU pods behind it, the
gang bound within a bounded number of cycles while the small pods wait."""

from __future__ import annotations

from typing import Any

import pytest

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import Clock
from tests.kube.helpers import gpusched_cycle as cycle

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NS = "ml-team"


def pod(name: str, **kwargs: Any) -> dict[str, Any]:
    return objects.pod(name, scheduler="gpusched", **kwargs)


def gang_member(name: str) -> dict[str, Any]:
    obj = pod(name, gpus=2, annotations={"kueue.x-k8s.io/pod-group-total-count": "2"})
    obj["metadata"].setdefault("labels", {})["kueue.x-k8s.io/pod-group-name"] = "train"
    return obj


def node_of(fake: SimulatedKubernetes, name: str) -> str | None:
    return fake.pod(NS, name)["spec"].get("nodeName")


def test_the_head_gang_starts_within_bounded_cycles_on_one_8_gpu_node(fake) -> None:
    clock = Clock()
    fake.add_node(objects.node("gpu-a"))
    for k in range(8):
        fake.add_pod(pod(f"old-{k}", gpus=1))
    sched = cycle(fake, clock)
    sched.run_once()
    assert all(node_of(fake, f"old-{k}") == "gpu-a" for k in range(8))
    for k in range(8):  # the kubelet started them
        fake.update_pod(NS, f"old-{k}", lambda p: p["status"].update(phase="Running"))
    fake.add_pod(gang_member("train-0"))
    fake.add_pod(gang_member("train-1"))
    clock.advance(1)
    sched.run_once()  # the gang is known and at the head before the small pods come
    for k in range(6):
        fake.add_pod(pod(f"small-{k}", gpus=1))
    started_after = None
    for k in range(6):  # one old pod ends per cycle
        fake.delete_pod(NS, f"old-{k}")
        clock.advance(30)  # past every backoff
        report = sched.run_once()
        if started_after is None and node_of(fake, "train-0") and node_of(fake, "train-1"):
            started_after = k + 1
        if started_after is None:
            assert report.reserved == 1
            assert not any(node_of(fake, f"small-{j}") for j in range(6))
    assert started_after == 4
    assert sum(1 for j in range(6) if node_of(fake, f"small-{j}")) == 2
