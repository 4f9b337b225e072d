"""The one cycle through the Kubernetes side, against the simulated Kubernetes API with the official
client: quota, gangs, preemption through the Eviction API, disruption budgets, terminating pods,
DCGM load, and workloads submitted through the REST API made into real pods."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from kube.models import KubePod
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.types import Resources, ServiceClass
from scheduling.models import Allocation, Pod, Workload
from scheduling.pod_template import PodTemplate
from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes
from sim.runs import simulations_record
from telemetry.models import GpuLatest
from tests.kube import objects
from tests.kube.helpers import Clock, side_of
from tests.kube.helpers import gpusched_cycle as cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NS = "ml-team"


def pod(name: str, **kwargs: Any) -> dict[str, Any]:
    return objects.pod(name, scheduler="gpusched", **kwargs)


def quota(fake: SimulatedKubernetes, gpus: int) -> None:
    """`gpus` of quota for the namespace, applied as `applyqueues` does: the cluster has no Kueue
    CRDs, so its queues are the database's (kube.kueue)."""
    fake.kueue_versions = ()
    docs = [
        {
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100"},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": objects.H100}},
        },
        {
            "kind": "ClusterQueue",
            "metadata": {"name": NS},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": "h100",
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                            }
                        ],
                    }
                ]
            },
        },
        {
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"clusterQueue": NS},
        },
    ]
    services.queues_apply(config=parse_documents(docs))


def scheduled_condition(fake: SimulatedKubernetes, name: str) -> dict[str, Any]:
    conditions = fake.pod(NS, name)["status"].get("conditions") or []
    return next(c for c in conditions if c["type"] == "PodScheduled")


def node_of(fake: SimulatedKubernetes, name: str) -> str | None:
    return fake.pod(NS, name)["spec"].get("nodeName")


def test_a_pod_beyond_quota_stays_pending_with_the_reason_once(fake) -> None:
    fake.add_node(objects.node("gpu-a"))
    quota(fake, 4)
    fake.add_pod(pod("first", gpus=4))
    fake.add_pod(pod("second", gpus=4))
    sched = cycle(fake)
    sched.run_once()
    sched.run_once()
    assert node_of(fake, "first") == "gpu-a"
    assert node_of(fake, "second") is None
    condition = scheduled_condition(fake, "second")
    assert condition["status"] == "False"
    assert "WaitingForQuota" in condition["message"] and NS in condition["message"]
    told = [e for e in fake.events if e["regarding"]["name"] == "second"]
    assert len(told) == 1 and told[0]["reason"] == "FailedScheduling"


def test_a_four_pod_gang_is_placed_all_or_nothing(fake) -> None:
    fake.add_node(objects.node("gpu-a"))
    group = {"kueue.x-k8s.io/pod-group-total-count": "4"}
    for k in range(3):
        fake.add_pod(_grouped(pod(f"train-{k}", gpus=2, annotations=group)))
    sched = cycle(fake)
    sched.run_once()
    assert all(node_of(fake, f"train-{k}") is None for k in range(3))  # 3 of 4 exist
    assert "3 of 4 pods" in scheduled_condition(fake, "train-0")["message"]
    fake.add_pod(objects.pod("hog", scheduler="gpusched", gpus=2))  # leaves 6 GPUs
    fake.add_pod(_grouped(pod("train-3", gpus=2, annotations=group)))
    sched.run_once()
    sched.run_once()
    placed = [node_of(fake, f"train-{k}") for k in range(4)]
    assert placed.count(None) in (0, 4)  # never partly
    (workload,) = Workload.objects.filter(pods__kube__name="train-0").distinct()
    assert workload.pods.count() == 4 and workload.pods.filter(gang_min_count=4).count() == 4

    # A second gang that cannot fit whole binds nothing.
    big = {"kueue.x-k8s.io/pod-group-total-count": "2"}
    for k in range(2):
        fake.add_pod(_grouped(pod(f"big-{k}", gpus=8, annotations=big), group="big"))
    sched.run_once()
    assert [node_of(fake, f"big-{k}") for k in range(2)] == [None, None]


def _grouped(obj: dict[str, Any], group: str = "train") -> dict[str, Any]:
    obj["metadata"].setdefault("labels", {})["kueue.x-k8s.io/pod-group-name"] = group
    return obj


def _fill_with_batch(fake: SimulatedKubernetes, sched: SchedulingCycle) -> None:
    for k in range(4):
        fake.add_pod(pod(f"batch-{k}", gpus=2, annotations={"gpusched.io/service-class": "batch"}))
    sched.run_once()
    assert all(node_of(fake, f"batch-{k}") == "gpu-a" for k in range(4))
    for k in range(4):  # the kubelet started them
        fake.update_pod(NS, f"batch-{k}", lambda p: p["status"].update(phase="Running"))


def _online(fake: SimulatedKubernetes, name: str = "serve") -> None:
    online = pod(name, gpus=2, annotations={"gpusched.io/service-class": "online"})
    online["spec"]["priority"] = 1000
    fake.add_pod(online)


def test_an_online_pod_that_fits_nowhere_evicts_batch_pods_and_waits_for_them(fake) -> None:
    fake.add_node(objects.node("gpu-a"))
    clock = Clock()
    sched = cycle(fake, clock)
    _fill_with_batch(fake, sched)
    _online(fake)
    report = sched.run_once()

    assert report.preempted == 1
    evicting = [p for p in fake.objects("pods", NS) if p["metadata"].get("deletionTimestamp")]
    assert len(evicting) == 1  # through the Eviction API: graceful deletion
    victim = evicting[0]["metadata"]["name"]
    preempted = [e for e in fake.events if e["reason"] == "Preempted"]
    assert preempted and "serve" in preempted[0]["note"]
    # Its capacity is held until it is gone: the preemptor waits nominated to the node, and
    # another pod that would fit in that room does not get it either.
    assert node_of(fake, "serve") is None
    assert fake.pod(NS, "serve")["status"].get("nominatedNodeName") == "gpu-a"
    fake.add_pod(pod("sneaky", gpus=2))
    sched.run_once()
    assert node_of(fake, "serve") is None and node_of(fake, "sneaky") is None
    assert Pod.objects.get(kube__name=victim).phase == Pod.Phase.TERMINATING
    # Tried again while the victim still terminates, it keeps waiting for it: no second
    # preemption of the pods left (the nomination is kept across cycles).
    for _ in range(3):
        clock.advance(11)
        assert sched.run_once().preempted == 0
    evicting = [p for p in fake.objects("pods", NS) if p["metadata"].get("deletionTimestamp")]
    assert [p["metadata"]["name"] for p in evicting] == [victim]
    assert Pod.objects.get(kube__name="serve").nominated_node == "gpu-a"

    fake.delete_pod(NS, victim)  # the kubelet finished its termination
    clock.advance(11)  # past the preemptor's backoff
    sched.run_once()
    assert node_of(fake, "serve") == "gpu-a"
    assert Pod.objects.get(kube__name="serve").nominated_node == ""
    assert Allocation.objects.filter(pod__kube__name=victim, active=True).count() == 0


def test_a_disruption_budget_that_forbids_it_is_honoured(fake) -> None:
    fake.add_node(objects.node("gpu-a"))
    sched = cycle(fake)
    _fill_with_batch(fake, sched)
    for k in range(4):
        fake.update_pod(
            NS, f"batch-{k}", lambda p: p["metadata"].setdefault("labels", {}).update(app="trainer")
        )
    fake.put(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "trainers", "namespace": NS},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )
    _online(fake)
    side_of(sched).budgets.refresh(force=True)
    report = sched.run_once()
    assert report.preempted == 0
    assert not [p for p in fake.objects("pods", NS) if p["metadata"].get("deletionTimestamp")]
    assert node_of(fake, "serve") is None


def test_load_aware_scores_differ_from_neutral_when_telemetry_is_fresh(fake) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    sched = cycle(fake)
    sched.run_once()  # nodes mirrored
    now = timezone.now()
    for node, busy in (("gpu-a", 0.9), ("gpu-b", 0.05)):
        GpuLatest.objects.bulk_create(
            GpuLatest(node=node, gpu_index=g, uuid=f"{node}-{g}", busy=busy, sampled_at=now)
            for g in range(8)
        )
    fake.add_pod(pod("svc", gpus=1, annotations={"gpusched.io/service-class": "online"}))
    sched.run_once()
    assert node_of(fake, "svc") == "gpu-b"
    decision = Pod.objects.get(kube__name="svc").decisions.get()
    scores = {c["node"]: c["scores"]["LoadAware"] for c in decision.explanation["candidates"]}
    assert scores["gpu-b"] > scores["gpu-a"] and 50.0 not in scores.values()


def test_a_workload_submitted_through_the_api_becomes_pods_in_the_namespace_and_is_bound(
    fake,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_namespace(NS)
    sched = cycle(fake)
    sched.run_once()
    tenant = factories.tenant(NS)
    template = PodTemplate(resources=Resources(cpu_milli=2000, memory_mib=4096, gpus=2))
    workload = services.workload_submit(
        tenant=tenant,
        name="llama",
        pod_sets=[services.PodSetSpec("workers", 2, template, min_count=2)],
        service_class=ServiceClass.BATCH,
    )
    simulations_record(workload, duration_s=60)  # how long the simulated kubelet runs them
    sched.run_once()  # the pods are made
    made = {p["metadata"]["name"]: p for p in fake.objects("pods", NS)}
    assert set(made) == {"llama-workers-0", "llama-workers-1"}
    owner = made["llama-workers-0"]["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("ConfigMap", "gpusched-llama")
    labels = made["llama-workers-0"]["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "default"
    assert labels["kueue.x-k8s.io/pod-group-name"] == "llama-workers"
    assert (
        made["llama-workers-0"]["metadata"]["annotations"]["sim.gpusched.io/duration-seconds"]
        == "60"
    )
    sched.run_once()
    sched.run_once()
    assert {node_of(fake, name) for name in made} == {"gpu-a"}
    assert KubePod.objects.filter(pod__workload=workload).count() == 2
    assert json.loads(fake.get_object("configmaps", NS, "gpusched-llama")["data"]["podSets"])

    # Cancelling deletes them (their parent), and what they hold is freed once they are gone.
    services.workload_cancel(workload=workload, now=timezone.now() + timedelta(seconds=1))
    assert Allocation.objects.filter(pod__workload=workload, active=True).count() == 2
    sched.run_once()
    assert not fake.objects("pods", NS) or all(
        p["metadata"].get("deletionTimestamp") for p in fake.objects("pods", NS)
    )


def test_a_node_whose_gpus_drop_under_a_pod_is_quarantined_and_told_the_rest_schedules(
    fake,
) -> None:
    """An unhealthy GPU lowers allocatable nvidia.com/gpu under the pod that holds it (issue 17)."""
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    sched = cycle(fake)
    fake.add_pod(pod("whole", gpus=8, annotations={"gpusched.io/topology-policy": "none"}))
    sched.run_once()
    held_on = node_of(fake, "whole")
    assert held_on is not None
    fake.update_node(held_on, lambda n: n["status"]["allocatable"].update({"nvidia.com/gpu": "7"}))
    fake.add_pod(pod("next", gpus=1))
    sched.run_once()
    sched.run_once()
    other = "gpu-b" if held_on == "gpu-a" else "gpu-a"
    assert node_of(fake, "next") == other
    told = [e for e in fake.events if e["regarding"].get("kind") == "Node"]
    assert any(e["reason"] == "Quarantined" and e["regarding"]["name"] == held_on for e in told)

    fake.delete_pod(NS, "whole")  # the pod is gone: the node is consistent again
    sched.run_once()
    sched.run_once()
    told = [e for e in fake.events if e["regarding"].get("kind") == "Node"]
    assert any(e["reason"] == "QuarantineLifted" for e in told)


def _queue_over(fake: SimulatedKubernetes, flavor: str, product: str, gpus: int) -> None:
    """ClusterQueue `ml-team` with `gpus` of quota in one flavor selecting `product` nodes."""
    fake.kueue_versions = ()
    docs = [
        {
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": product}},
        },
        {
            "kind": "ClusterQueue",
            "metadata": {"name": NS},
            "spec": {
                "resourceGroups": [
                    {
                        "coveredResources": ["nvidia.com/gpu"],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}],
                            }
                        ],
                    }
                ]
            },
        },
        {
            "kind": "LocalQueue",
            "metadata": {"name": "default", "namespace": NS},
            "spec": {"clusterQueue": NS},
        },
    ]
    services.queues_apply(config=parse_documents(docs))


A100 = "NVIDIA-A100-SXM4-80GB"
TWO_PER_NUMA = {
    "gpuIds": list(range(8)),
    "numaNode": {str(i): i // 2 for i in range(8)},
    "pcieSwitch": {str(i): i // 2 for i in range(8)},
    "totalGpus": 8,
}


def test_single_numa_pods_are_never_admitted_to_a_flavor_whose_nodes_cannot_host_them(
    fake,
) -> None:
    """The issue's deadlock on the Kubernetes side: five 4-GPU single-numa-node pods, an a100
    flavor whose nodes have 2 GPUs per NUMA node. No quota is reserved; each pod is told why."""
    for name in ("a100-a", "a100-b"):
        fake.add_node(objects.node(name, product=A100, topology=TWO_PER_NUMA))
    _queue_over(fake, "a100", A100, 20)
    single = {"gpusched.io/topology-policy": "single-numa-node"}
    for k in range(5):
        fake.add_pod(pod(f"vision-{k}", gpus=4, annotations=single))
    fake.add_pod(pod("fits", gpus=4, annotations={"gpusched.io/topology-policy": "none"}))
    sched = cycle(fake)
    for _ in range(3):
        sched.run_once()
    assert node_of(fake, "fits") in ("a100-a", "a100-b")
    for k in range(5):
        assert node_of(fake, f"vision-{k}") is None
        (workload,) = Workload.objects.filter(pods__kube__name=f"vision-{k}").distinct()
        assert workload.state == Workload.State.PENDING and workload.cluster_queue is None
        assert workload.pending_reason == "Inadmissible" and "flavor a100" in workload.reason
        message = scheduled_condition(fake, f"vision-{k}")["message"]
        assert "Inadmissible" in message and "single-numa-node" in message


def test_an_admitted_pod_that_cannot_be_placed_gives_its_quota_back_after_the_timeout(
    fake,
) -> None:
    """Quota for two 8-GPU pods, one 8-GPU node: the second is admitted but cannot be placed;
    after the pods-ready timeout its quota is released (PodsReadyTimeout) and it waits out the
    backoff before it is admitted again."""
    fake.add_node(objects.node("gpu-a"))
    _queue_over(fake, "h100", objects.H100, 16)
    clock = Clock()
    sched = cycle(fake, clock)
    fake.add_pod(pod("first", gpus=8))
    sched.run_once()
    sched.run_once()
    assert node_of(fake, "first") == "gpu-a"
    fake.add_pod(pod("stuck", gpus=8))
    sched.run_once()
    sched.run_once()
    (stuck,) = Workload.objects.filter(pods__kube__name="stuck").distinct()
    assert stuck.state == Workload.State.ADMITTED and node_of(fake, "stuck") is None

    clock.advance(301)
    report = sched.run_once()
    stuck.refresh_from_db()
    assert report.pods_ready_timeouts == 1
    assert stuck.state == Workload.State.PENDING and stuck.cluster_queue is None
    assert stuck.eviction_reason == "PodsReadyTimeout" and stuck.requeue_count == 1
    assert stuck.requeue_at == clock.now() + timedelta(seconds=60)
    sched.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.PENDING and stuck.pending_reason == "PodsReadyTimeout"
    assert "PodsReadyTimeout" in scheduled_condition(fake, "stuck")["message"]

    clock.advance(61)
    sched.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.ADMITTED
