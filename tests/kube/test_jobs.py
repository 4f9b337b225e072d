"""batch/v1 Jobs as workloads on the simulated API, through the official client (kube.jobs): a
queued Job is suspended, resumed with its flavor's node selector once admitted, suspended again
(its template restored) when preempted, resumed once readmitted, and its workload ends with it;
an Indexed Job's pods are placed all together, inside the rack its annotation asks for; a Job
gpusched does not own is left alone."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from kubernetes import client

from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import Allocation, Workload
from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import Clock, gpusched_cycle

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

NAMESPACE = "ml-team"
QUEUES = """
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {cloud.example.com/pool: h100}}
---
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
kind: LocalQueue
metadata: {name: team, namespace: ml-team}
spec: {clusterQueue: team}
"""


@pytest.fixture
def cluster(fake: SimulatedKubernetes) -> SimulatedKubernetes:
    """Two 4-GPU nodes of the flavor's pool (and the team's label, which its Jobs ask for),
    and the queues as `applyqueues` applies them."""
    fake.kueue_versions = ()
    fake.add_namespace(NAMESPACE)
    for name in ("gpu-a", "gpu-b"):
        fake.add_node(
            objects.node(
                name, gpus=4, labels={"cloud.example.com/pool": "h100", "example.com/team": "ml"}
            )
        )
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))
    return fake


def job(
    name: str,
    *,
    gpus: int = 4,
    parallelism: int = 2,
    completions: int | None = None,
    queue: str | None = "team",
    suspend: bool = True,
    indexed: bool = False,
    priority_class: str = "",
    scheduler: str = "gpusched",
) -> dict[str, Any]:
    labels = {"kueue.x-k8s.io/queue-name": queue} if queue else {}
    if priority_class:
        labels["kueue.x-k8s.io/priority-class"] = priority_class
    container = {
        "name": "train",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
    }
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": completions or parallelism,
        "suspend": suspend,
        "template": {
            "spec": {
                "schedulerName": scheduler,
                "restartPolicy": "Never",
                "nodeSelector": {"example.com/team": "ml"} if not indexed else None,
                "containers": [container],
            }
        },
    }
    if indexed:
        spec["completionMode"] = "Indexed"
    return {"metadata": {"name": name, "labels": labels}, "spec": spec}


def batch(fake: SimulatedKubernetes) -> Any:
    """The official client's BatchV1Api (untyped here: its models' fields are all optional)."""
    return client.BatchV1Api(fake.api_client())


def read(fake: SimulatedKubernetes, name: str) -> Any:
    return batch(fake).read_namespaced_job(name, NAMESPACE)


def pods_of(fake: SimulatedKubernetes, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in fake.objects("pods", NAMESPACE)
        if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == name
    ]


def steps(cycle: SchedulingCycle, clock: Clock, n: int = 3) -> None:
    """A few cycles, 11 s apart (past a pod's retry backoff): a change made in one (a Job
    resumed) is seen by the next one's informers."""
    for _ in range(n):
        cycle.run_once()
        clock.advance(11)


def terminated(fake: SimulatedKubernetes) -> list[str]:
    """The kubelets finish the pods being deleted (gracefully: bound ones wait for them)."""
    gone = []
    for pod in fake.objects("pods", NAMESPACE):
        if pod["metadata"].get("deletionTimestamp"):
            fake.delete_pod(NAMESPACE, pod["metadata"]["name"])
            gone.append(pod["metadata"]["name"])
    return gone


def end_pods(fake: SimulatedKubernetes, name: str) -> None:
    """The kubelets report the Job's pods succeeded."""
    for pod in pods_of(fake, name):

        def change(obj: dict[str, Any]) -> None:
            obj["status"]["phase"] = "Succeeded"

        fake.update_pod(NAMESPACE, pod["metadata"]["name"], change)


def test_a_job_is_resumed_preempted_resumed_again_and_ends_with_its_workload(
    cluster: SimulatedKubernetes,
) -> None:
    fake = cluster
    batch(fake).create_namespaced_job(NAMESPACE, job("low"))
    clock = Clock()
    cycle = gpusched_cycle(fake, clock)
    steps(cycle, clock)

    low = Workload.objects.get(kube_job__name="low")
    assert (low.origin, low.state) == ("job", "Admitted")
    assert low.pods.count() == 2
    spec = read(fake, "low").spec
    assert spec.suspend is False
    # The flavor's node labels written beside the template's own (Kueue's RunWithPodSetsInfo).
    assert spec.template.spec.node_selector == {
        "example.com/team": "ml",
        "cloud.example.com/pool": "h100",
    }
    placed = {p["spec"].get("nodeName") for p in pods_of(fake, "low")}
    assert placed == {"gpu-a", "gpu-b"}

    # A higher-priority Job preempts it: the low Job is suspended, its pods deleted by the Job
    # controller, its template given back, and its workload waits again.
    batch(fake).create_namespaced_job(NAMESPACE, job("high", priority_class="urgent"))
    steps(cycle, clock, 2)
    assert len(terminated(fake)) == 2  # the low Job's pods, deleted by its controller
    assert not pods_of(fake, "low")
    steps(cycle, clock, 3)
    low.refresh_from_db()
    assert (low.state, low.evictions, low.eviction_reason) == ("Pending", 1, "Preempted")
    spec = read(fake, "low").spec
    assert spec.suspend is True
    assert spec.template.spec.node_selector == {"example.com/team": "ml"}
    assert read(fake, "low").status.start_time is None
    assert read(fake, "high").spec.suspend is False
    assert {p["spec"].get("nodeName") for p in pods_of(fake, "high")} == {"gpu-a", "gpu-b"}

    # The high Job finishes: its workload ends, and the low one is admitted and resumed again.
    end_pods(fake, "high")
    steps(cycle, clock, 4)
    high = Workload.objects.get(kube_job__name="high")
    assert high.state == "Finished"
    low.refresh_from_db()
    assert low.state in ("Admitted", "Running")
    assert read(fake, "low").spec.suspend is False
    assert {p["spec"].get("nodeName") for p in pods_of(fake, "low")} == {"gpu-a", "gpu-b"}


def test_a_job_without_the_queue_label_or_not_suspended_is_left_alone(
    cluster: SimulatedKubernetes,
) -> None:
    fake = cluster
    batch(fake).create_namespaced_job(NAMESPACE, job("plain", queue=None))
    batch(fake).create_namespaced_job(NAMESPACE, job("running", parallelism=1, suspend=False))
    clock = Clock()
    steps(gpusched_cycle(fake, clock), clock)
    assert read(fake, "plain").spec.suspend is True
    assert read(fake, "plain").spec.template.spec.node_selector == {"example.com/team": "ml"}
    assert not Workload.objects.filter(origin="job").exists()
    # Not a Job workload: its pod, for gpusched's schedulerName, is mirrored as a pod is.
    assert [w.origin for w in Workload.objects.all()] == ["mirrored"]


def test_an_indexed_jobs_pods_are_placed_all_together(cluster: SimulatedKubernetes) -> None:
    """Two pods of 4 GPUs while another scheduler's pod holds 2 GPUs of gpu-b: the one pod that
    would fit (on gpu-a) is not placed alone; once gpu-b is free both are, each in the Pod row of
    its completion index."""
    fake = cluster
    other = objects.pod("other", gpus=2, node_name="gpu-b", phase="Running")
    fake.add_pod(other)
    batch(fake).create_namespaced_job(NAMESPACE, job("gang", gpus=4, parallelism=2, indexed=True))
    clock = Clock()
    cycle = gpusched_cycle(fake, clock)
    steps(cycle, clock, 4)
    workload = Workload.objects.get(kube_job__name="gang")
    assert {p.gang_min_count for p in workload.pods.all()} == {2}
    pods = pods_of(fake, "gang")
    assert len(pods) == 2 and not any(p["spec"].get("nodeName") for p in pods)

    fake.delete_pod(NAMESPACE, "other")
    steps(cycle, clock, 2)
    pods = pods_of(fake, "gang")
    assert {p["spec"].get("nodeName") for p in pods} == {"gpu-a", "gpu-b"}
    for pod in pods:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        row = workload.pods.get(kube__uid=pod["metadata"]["uid"])
        assert row.name == f"gang-{index}"


def test_a_jobs_later_pods_fill_the_rows_its_finished_pods_left(
    cluster: SimulatedKubernetes,
) -> None:
    """Two completions one at a time: the first pod's end frees its Pod row (and its GPUs) for
    the second, and the workload ends with the Job, not with its first pod."""
    fake = cluster
    batch(fake).create_namespaced_job(NAMESPACE, job("serial", parallelism=1, completions=2))
    clock = Clock()
    cycle = gpusched_cycle(fake, clock)
    steps(cycle, clock)
    workload = Workload.objects.get(kube_job__name="serial")
    (first,) = pods_of(fake, "serial")
    assert first["spec"].get("nodeName")
    end_pods(fake, "serial")
    steps(cycle, clock)
    workload.refresh_from_db()
    assert workload.state in ("Admitted", "Running")
    (row,) = workload.pods.all()
    second = next(
        p for p in pods_of(fake, "serial") if p["metadata"]["uid"] != first["metadata"]["uid"]
    )
    assert second["spec"].get("nodeName")
    assert row.kube.uid == second["metadata"]["uid"] and row.phase == "Bound"
    released = Allocation.objects.filter(pod=row, active=False)
    assert [a.release_reason for a in released] == ["pod gone, its workload goes on"]
    end_pods(fake, "serial")
    steps(cycle, clock, 2)
    assert read(fake, "serial").status.succeeded == 2
    workload.refresh_from_db()
    assert workload.state == "Finished"
    assert not Allocation.objects.filter(pod__workload=workload, active=True).exists()


def test_a_deleted_job_cancels_its_workload_and_a_cancelled_workload_leaves_its_job_suspended(
    cluster: SimulatedKubernetes,
) -> None:
    fake = cluster
    batch(fake).create_namespaced_job(NAMESPACE, job("gone"))
    batch(fake).create_namespaced_job(NAMESPACE, job("cancelled", gpus=2))
    clock = Clock()
    cycle = gpusched_cycle(fake, clock)
    steps(cycle, clock)
    assert read(fake, "cancelled").spec.suspend is False
    services.workload_cancel(workload=Workload.objects.get(kube_job__name="cancelled"))
    batch(fake).delete_namespaced_job("gone", NAMESPACE, propagation_policy="Background")
    steps(cycle, clock, 2)
    assert Workload.objects.get(kube_job__name="gone").state == "Cancelled"
    assert read(fake, "cancelled").spec.suspend is True
    assert read(fake, "cancelled").spec.template.spec.node_selector == {"example.com/team": "ml"}


# A Job asking for a topology domain, as Kueue's TAS documentation writes one: a Topology and a
# ResourceFlavor naming it, the template annotated podset-required-topology.
BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
TAS_QUEUES = f"""
apiVersion: kueue.x-k8s.io/v1beta1
kind: Topology
metadata: {{name: default}}
spec:
  levels:
  - nodeLabel: {BLOCK}
  - nodeLabel: {RACK}
  - nodeLabel: kubernetes.io/hostname
---
kind: ResourceFlavor
metadata: {{name: tas}}
spec: {{nodeLabels: {{cloud.example.com/pool: h100}}, topologyName: default}}
---
kind: ClusterQueue
metadata: {{name: team}}
spec:
  namespaceSelector: {{}}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: tas
      resources:
      - {{name: nvidia.com/gpu, nominalQuota: 40}}
---
kind: LocalQueue
metadata: {{name: team, namespace: {NAMESPACE}}}
spec: {{clusterQueue: team}}
"""


@pytest.fixture
def racks(fake: SimulatedKubernetes) -> SimulatedKubernetes:
    """Rack r1 of three 4-GPU nodes, rack r2 of two, in one block."""
    fake.kueue_versions = ()
    fake.add_namespace(NAMESPACE)
    for rack, count in (("r1", 3), ("r2", 2)):
        for k in range(count):
            name = f"{rack}-{k}"
            labels = {
                "cloud.example.com/pool": "h100",
                BLOCK: "b1",
                RACK: rack,
                "kubernetes.io/hostname": name,
            }
            fake.add_node(objects.node(name, gpus=4, labels=labels))
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(TAS_QUEUES))))
    return fake


def rack_job(name: str, pods: int) -> dict[str, Any]:
    doc = job(name, gpus=4, parallelism=pods, indexed=True)
    doc["spec"]["template"]["metadata"] = {
        "annotations": {"kueue.x-k8s.io/podset-required-topology": RACK}
    }
    return doc


def test_a_jobs_pods_are_bound_inside_the_rack_its_annotation_asks_for(
    racks: SimulatedKubernetes,
) -> None:
    fake = racks
    batch(fake).create_namespaced_job(NAMESPACE, rack_job("fits", 2))
    batch(fake).create_namespaced_job(NAMESPACE, rack_job("too-big", 4))
    clock = Clock()
    cycle = gpusched_cycle(fake, clock)
    steps(cycle, clock, 4)

    assert read(fake, "fits").spec.suspend is False
    assert {p["spec"].get("nodeName") for p in pods_of(fake, "fits")} == {"r2-0", "r2-1"}
    assert Workload.objects.filter(kube_job__name="too-big").exists()
    assert read(fake, "too-big").spec.suspend is True
    assert pods_of(fake, "too-big") == []
