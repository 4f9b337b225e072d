"""Reclaim through the Kubernetes side: the idle part of a time-sliced GPU (the node's GFD sharing
label says so) is lent to an opportunistic pod, and an online pod placed on that GPU waits,
nominated to the node, until the lent pod it had evicted is gone: it never runs beside it."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.models import GpuAssignment, Pod
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.load_feed import LoadFeed
from scheduling.worker.reclaim import ReclaimFeed
from sim.kubernetes.simulated import SimulatedKubernetes
from telemetry.models import GpuLatest
from tests.kube import objects
from tests.kube.helpers import Clock
from tests.kube.helpers import gpusched_cycle as cycle

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NS = "ml-team"
TIME_SLICED = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}


def share(name: str, milli: int, service_class: str, priority: int = 0) -> dict[str, Any]:
    obj = objects.pod(
        name,
        scheduler="gpusched",
        cpu="1",
        extra={"gpusched.io/gpu-milli": str(milli)},
        annotations={"gpusched.io/service-class": service_class},
    )
    obj["spec"]["priority"] = priority
    return obj


def measure(clock: Clock, node: str, busy: float) -> None:
    """DCGM reads the node's GPU at `busy`, now."""
    GpuLatest.objects.filter(node=node).delete()
    GpuLatest.objects.create(
        node=node, gpu_index=0, uuid=f"{node}-0", busy=busy, sampled_at=clock.now()
    )


def node_of(fake: SimulatedKubernetes, name: str) -> str | None:
    return fake.pod(NS, name)["spec"].get("nodeName")


def running(fake: SimulatedKubernetes, name: str) -> None:
    fake.update_pod(NS, name, lambda p: p["status"].update(phase="Running"))


def lending(
    fake: SimulatedKubernetes, clock: Clock, labels: dict[str, str], owner: dict[str, Any]
) -> SchedulingCycle:
    """One 1-GPU node with `labels`; a batch `owner` on its GPU, measured nearly idle for ten
    minutes; then an opportunistic share asks for 300 milli."""
    fake.add_node(objects.node("gpu-a", gpus=1, labels=labels))
    sched = cycle(
        fake,
        clock,
        load_feed=LoadFeed(monotonic=clock.monotonic, clock=clock.now),
        reclaim_feed=ReclaimFeed(refresh_every_s=0.0, monotonic=clock.monotonic),
    )
    fake.add_pod(owner)
    sched.run_once()
    assert node_of(fake, "owner") == "gpu-a"
    running(fake, "owner")
    clock.advance(600)
    measure(clock, "gpu-a", busy=0.05)
    fake.add_pod(share("sweep", 300, "opportunistic"))
    sched.run_once()
    return sched


def whole_gpu_owner() -> dict[str, Any]:
    obj = objects.pod("owner", scheduler="gpusched", cpu="1", gpus=1)
    obj["metadata"]["annotations"] = {"gpusched.io/service-class": "batch"}
    return obj


def test_a_time_sliced_gpus_idle_capacity_is_lent_to_an_opportunistic_pod(fake) -> None:
    lending(fake, Clock(), TIME_SLICED, whole_gpu_owner())

    assert node_of(fake, "sweep") == "gpu-a"
    assert GpuAssignment.objects.get(active=True, allocation__pod__kube__name="sweep").reclaimed


def test_a_gpu_the_sharing_label_does_not_share_lends_nothing(fake) -> None:
    lending(fake, Clock(), {}, whole_gpu_owner())

    assert node_of(fake, "sweep") is None
    assert not GpuAssignment.objects.filter(reclaimed=True).exists()


def test_an_online_pod_waits_for_the_lent_pod_on_its_gpu_to_be_gone(fake) -> None:
    clock = Clock()
    sched = lending(fake, clock, TIME_SLICED, share("owner", 500, "batch"))
    running(fake, "sweep")
    fake.add_pod(share("serve", 400, "online", priority=1000))

    report = sched.run_once()

    assert report.preempted == 1
    assert fake.pod(NS, "sweep")["metadata"].get("deletionTimestamp")  # the Eviction API
    (event,) = [e for e in fake.events if e["reason"] == "Preempted"]
    assert event["note"] == "Reclaimed: GPU gpu-a/gpu0: an online pod now holds the GPU"
    assert node_of(fake, "serve") is None
    assert fake.pod(NS, "serve")["status"].get("nominatedNodeName") == "gpu-a"
    for _ in range(3):  # the lent pod's grace period: no second eviction, still waiting
        clock.advance(11)
        assert sched.run_once().preempted == 0
        assert node_of(fake, "serve") is None
    assert Pod.objects.get(kube__name="serve").last_reason.startswith("Reclaiming: waiting")

    fake.delete_pod(NS, "sweep")  # its kubelet finished the termination
    clock.advance(11)
    sched.run_once()

    assert node_of(fake, "serve") == "gpu-a"
    assert not GpuAssignment.objects.filter(active=True, reclaimed=True).exists()
