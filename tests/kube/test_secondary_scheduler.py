"""End to end: the official `kubernetes` client against the fake API server; pods pending for our
schedulerName get bound to the right nodes with GPU-id annotations, events and conditions."""

from __future__ import annotations

import pytest

from kube.models import KubePod
from scheduling.models import Allocation, Gpu, Node, Pod
from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import Clock, scheduler, side_of

WHOLE_NODE = {"gpusched.io/topology-policy": "none"}

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_pending_pods_are_bound_with_gpu_ids_and_scheduled_events(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("cpu-only", gpus=0))
    fake.add_pod(
        objects.pod(
            "train-0",
            gpus=4,
            annotations={"gpusched.io/topology-policy": "single-numa-node"},
        )
    )
    fake.add_pod(objects.pod("web-0", scheduler="default-scheduler", cpu="1"))

    report = scheduler(fake).run_once()

    assert report.leading and report.bound == 1
    bound = fake.pod("ml-team", "train-0")
    assert bound["spec"]["nodeName"] == "gpu-a"
    ids = [int(i) for i in bound["metadata"]["annotations"]["gpusched.io/gpu-ids"].split(",")]
    assert ids in ([0, 1, 2, 3], [4, 5, 6, 7])  # one NUMA node of the seeds' topology
    assert fake.pod("ml-team", "web-0")["spec"].get("nodeName") is None  # not ours
    (event,) = fake.events
    assert event["reason"] == "Scheduled" and event["type"] == "Normal"
    assert event["note"] == "Successfully assigned ml-team/train-0 to gpu-a"
    assert event["regarding"]["uid"] == bound["metadata"]["uid"]
    # The database mirrors the cluster: nodes from Kubernetes, the pod bound on the same GPUs.
    assert set(Node.objects.values_list("source", flat=True)) == {"kubernetes"}
    kube_pod = KubePod.objects.get(uid=bound["metadata"]["uid"])
    assert kube_pod.pod.phase == Pod.Phase.BOUND
    allocation = Allocation.objects.get(pod=kube_pod.pod, active=True)
    held = sorted(allocation.gpus.values_list("gpu__index", flat=True))
    assert held == ids
    assert Gpu.objects.filter(used_milli=1000).count() == 4


def test_gated_pods_and_other_schedulers_pods_wait_until_they_are_ours(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("gated", gpus=1, gates=["kueue.x-k8s.io/admission"]))
    fake.add_pod(objects.pod("theirs", gpus=1, scheduler="default-scheduler"))
    sched = scheduler(fake)
    assert sched.run_once().bound == 0
    assert not fake.bindings and not KubePod.objects.filter(owned=True).exists()

    fake.update_pod("ml-team", "gated", lambda p: p["spec"].pop("schedulingGates"))
    report = sched.run_once()
    assert report.bound == 1
    assert fake.pod("ml-team", "gated")["spec"]["nodeName"] == "gpu-a"
    assert fake.pod("ml-team", "theirs")["spec"].get("nodeName") is None


def test_a_409_on_bind_releases_the_reservation_and_requeues(fake: SimulatedKubernetes) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    # A whole-node pod opts out of GPUTopologyAware's one-NUMA-node default for multi-GPU pods.
    fake.add_pod(objects.pod("contended", gpus=8, annotations=WHOLE_NODE))

    def rival_binds_first(namespace: str, name: str) -> None:
        fake.on_binding = None
        fake.update_pod(namespace, name, lambda p: p["spec"].update(nodeName="gpu-b"))

    fake.on_binding = rival_binds_first
    sched = scheduler(fake)
    report = sched.run_once()

    assert (report.bound, report.conflicts, report.requeued) == (0, 1, 1)
    assert not fake.bindings and not fake.events  # no Scheduled event for a refused bind
    pod = KubePod.objects.get(name="contended").pod
    assert pod.phase == Pod.Phase.PENDING  # requeued ...
    assert not Allocation.objects.filter(pod=pod, active=True).exists()  # ... nothing held
    assert Gpu.objects.filter(used_milli__gt=0).count() == 0

    # The next cycle sees where the rival put it and counts it there.
    sched.run_once()
    pod.refresh_from_db()
    assert pod.phase == Pod.Phase.BOUND
    allocation = Allocation.objects.get(pod=pod, active=True)
    assert allocation.node.name == "gpu-b" and allocation.gpus.count() == 8


def test_unschedulable_pods_get_a_failed_scheduling_event_and_condition_once(
    fake: SimulatedKubernetes,
) -> None:
    clock = Clock()
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("huge", gpus=16))
    sched = scheduler(fake, clock=clock, now=clock.now)

    report = sched.run_once()

    assert report.unschedulable == 1 and report.bound == 0
    (event,) = fake.events
    assert (event["type"], event["reason"], event["action"]) == (
        "Warning",
        "FailedScheduling",
        "Scheduling",
    )
    assert event["note"].startswith("0/1 nodes are available: 1 ")
    assert event["eventTime"] == "2026-01-01T00:16:40.000000Z"  # microsecond 0, still 6 digits
    (namespace, name, patch) = fake.status_patches[0]
    condition = patch["status"]["conditions"][0]
    assert (namespace, name) == ("ml-team", "huge")
    assert condition["type"] == "PodScheduled" and condition["status"] == "False"
    assert condition["reason"] == "Unschedulable" and condition["message"] == event["note"]
    assert condition["lastTransitionTime"] == "2026-01-01T00:16:40Z"
    stored = fake.pod("ml-team", "huge")["status"]["conditions"]
    assert [c["status"] for c in stored if c["type"] == "PodScheduled"] == ["False"]

    clock.advance(30)  # past the backoff: tried again, same reason, no new event
    assert sched.run_once().unschedulable == 1
    assert len(fake.events) == 1 and len(fake.status_patches) == 1


def test_a_pod_gpusched_cannot_represent_is_reported_not_bound(fake: SimulatedKubernetes) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("odd", extra={"gpusched.io/gpu-milli": "1500"}))
    sched = scheduler(fake)
    sched.run_once()
    sched.run_once()
    (event,) = fake.events
    assert event["reason"] == "FailedScheduling"
    assert "gpusched.io/gpu-milli: a share of one GPU is 1..999" in event["note"]
    assert fake.status_patches[0][2]["status"]["conditions"][0]["reason"] == "SchedulerError"
    assert not fake.bindings


def test_watch_resumes_from_its_resource_version_and_relists_after_410(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    sched = scheduler(fake)
    sched.run_once()
    assert (side_of(sched).pods.lists, side_of(sched).pods.watches) == (1, 0)

    fake.add_pod(objects.pod("p1", gpus=1))
    assert sched.run_once().bound == 1
    assert (side_of(sched).pods.lists, side_of(sched).pods.watches) == (
        1,
        1,
    )  # a watch, not a new list
    watch_paths = [p for m, p in fake.requests if "watch=" in p and "/pods" in p]
    assert "resourceVersion=" in watch_paths[-1]

    fake.compact()  # the version the watch resumes from is gone: 410, then a relist
    fake.add_pod(objects.pod("p2", gpus=1))
    sched.run_once()
    assert side_of(sched).pods.expired == 1 and side_of(sched).pods.resource_version is None
    report = sched.run_once()
    assert side_of(sched).pods.lists == 2
    assert report.bound == 1
    assert fake.pod("ml-team", "p2")["spec"]["nodeName"] == "gpu-a"


def test_finished_and_deleted_pods_give_their_gpus_back(fake: SimulatedKubernetes) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("first", gpus=8, annotations=WHOLE_NODE))
    fake.add_pod(objects.pod("second", gpus=8, annotations=WHOLE_NODE))
    clock = Clock()
    sched = scheduler(fake, clock=clock, now=clock.now)
    sched.run_once()
    assert Gpu.objects.filter(used_milli=1000).count() == 8
    first_on = [n for n in ("first", "second") if fake.pod("ml-team", n)["spec"].get("nodeName")]
    (done,) = first_on
    waiting = "second" if done == "first" else "first"

    fake.update_pod("ml-team", done, lambda p: p["status"].update(phase="Running"))
    sched.run_once()
    assert KubePod.objects.get(name=done).pod.phase == Pod.Phase.RUNNING

    # Succeeded leaves the informer's field selector: a DELETED event with the final object.
    fake.update_pod("ml-team", done, lambda p: p["status"].update(phase="Succeeded"))
    sched.run_once()
    assert KubePod.objects.get(name=done).pod.phase == Pod.Phase.SUCCEEDED
    clock.advance(30)  # past the waiting pod's backoff
    sched.run_once()
    assert fake.pod("ml-team", waiting)["spec"]["nodeName"] == "gpu-a"

    fake.delete_pod("ml-team", waiting)
    sched.run_once()
    assert KubePod.objects.get(name=waiting).pod.phase == Pod.Phase.FAILED
    assert Gpu.objects.filter(used_milli__gt=0).count() == 0


def just_finished(fake: SimulatedKubernetes) -> SchedulingCycle:
    """A pod `done` placed and seen running, then Succeeded in the cluster (not seen yet)."""
    fake.add_node(objects.node("gpu-a"))
    sched = scheduler(fake)
    fake.add_pod(objects.pod("done", gpus=1))
    sched.run_once()
    fake.update_pod("ml-team", "done", lambda p: p["status"].update(phase="Running"))
    sched.run_once()
    assert KubePod.objects.get(name="done").pod.phase == Pod.Phase.RUNNING
    fake.update_pod("ml-team", "done", lambda p: p["status"].update(phase="Succeeded"))
    return sched


def test_a_pod_that_finishes_just_before_a_full_resync_is_recorded_succeeded(
    fake: SimulatedKubernetes,
) -> None:
    sched = just_finished(fake)
    side_of(sched).resync()  # the periodic full comparison falls on this sync
    sched.run_once()

    pod = KubePod.objects.get(name="done").pod
    assert pod.phase == Pod.Phase.SUCCEEDED and pod.workload.state == "Finished"


def test_a_pod_that_finished_while_the_watch_had_expired_is_recorded_succeeded(
    fake: SimulatedKubernetes,
) -> None:
    sched = just_finished(fake)
    fake.compact()  # the watch's version is gone: 410, then a list without the finished pod
    sched.run_once()
    sched.run_once()

    assert side_of(sched).pods.lists == 2
    assert KubePod.objects.get(name="done").pod.phase == Pod.Phase.SUCCEEDED


def test_pods_bound_by_others_are_counted_where_they_run(fake: SimulatedKubernetes) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    foreign = objects.pod("foreign", gpus=6, scheduler="default-scheduler", node_name="gpu-a")
    foreign["status"]["phase"] = "Running"
    fake.add_pod(foreign)
    fake.add_pod(objects.pod("mine", gpus=4))

    report = scheduler(fake).run_once()

    assert report.side_counts["pods_adopted"] == 1 and report.bound == 1
    assert fake.pod("ml-team", "mine")["spec"]["nodeName"] == "gpu-b"
    adopted = KubePod.objects.get(name="foreign")
    assert not adopted.owned and adopted.pod.phase == Pod.Phase.RUNNING
    assert Gpu.objects.filter(node__name="gpu-a", used_milli=1000).count() == 6


def test_mig_mixed_strategy_pods_get_mig_slots(fake: SimulatedKubernetes) -> None:
    mig_node = objects.node(
        "a100-mig",
        gpus=0,
        product="NVIDIA-A100-SXM4-80GB",
        labels={"nvidia.com/mig.strategy": "mixed"},
        allocatable={"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "7"},
    )
    fake.add_node(mig_node)
    fake.add_pod(objects.pod("infer", cpu="1", extra={"nvidia.com/mig-1g.10gb": "2"}))

    assert scheduler(fake).run_once().bound == 1

    annotations = fake.pod("ml-team", "infer")["metadata"]["annotations"]
    assert annotations["gpusched.io/gpu-ids"] == "0"
    slots = annotations["gpusched.io/mig-slots"].split(",")
    assert len(slots) == 2 and all(s.startswith("0:") for s in slots)


def test_topology_from_node_resource_topology_v1alpha1(fake: SimulatedKubernetes) -> None:
    fake.nrt_versions = ("v1alpha1",)
    fake.add_node(objects.node("pcie", topology={}))  # no usable annotation
    fake.set_nrt(objects.nrt("pcie", [(64, 4), (64, 4)], version="v1alpha1"))
    fake.add_pod(
        objects.pod("numa", gpus=4, annotations={"gpusched.io/topology-policy": "restricted"})
    )
    sched = scheduler(fake)
    sched.run_once()
    assert side_of(sched).nrt.version == "v1alpha1"
    node = Node.objects.get(name="pcie")
    assert node.topology["gpu_numa"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert node.topology["numa_cpus"] == [64, 64]
    ids = fake.pod("ml-team", "numa")["metadata"]["annotations"]["gpusched.io/gpu-ids"]
    assert ids in ("0,1,2,3", "4,5,6,7")
