"""gpusched admits with the Kueue objects of the cluster it schedules (kube.kueue): created in the
cluster they become the queues and act; gone from the cluster they go; a broken one is reported
and the last good queues stay, scheduling on."""

from __future__ import annotations

import pytest
import yaml

from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import (
    AdmissionFairSharingSettings,
    ClusterQueue,
    LocalQueue,
    PriorityClass,
    QueueSource,
    ResourceFlavor,
    Workload,
)
from scheduling.worker import metrics
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import side_of
from tests.kube.kueue_cluster import (
    NS,
    cluster_queue,
    create,
    custom,
    cycle,
    delete,
    flavor,
    local_queue,
    node_of,
    queued_pod,
    scheduled_message,
)

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def kueue_objects(fake: SimulatedKubernetes, gpus: int = 4) -> None:
    create(fake, "resourceflavors", flavor())
    create(fake, "clusterqueues", cluster_queue(gpus=gpus))
    create(fake, "localqueues", local_queue())


def patch(fake: SimulatedKubernetes, spec: dict) -> None:
    """A merge patch of ClusterQueue team's spec, as `kubectl patch --type merge`."""
    custom(fake).patch_cluster_custom_object(
        "kueue.x-k8s.io", "v1beta2", "clusterqueues", "team", {"spec": spec}
    )


def refused_gauge() -> float:
    value = metrics.registry.get_sample_value("gpusched_queue_objects_refused")
    assert value is not None
    return value


def test_kueue_objects_created_in_the_cluster_become_the_queues_and_act(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    kueue_objects(fake, gpus=4)
    create(
        fake,
        "workloadpriorityclasses",
        {"kind": "WorkloadPriorityClass", "metadata": {"name": "urgent"}, "value": 1000},
    )
    fake.add_pod(queued_pod("first", 4))
    late = queued_pod("late-but-urgent", 4)
    late["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = "urgent"
    fake.add_pod(late)
    sched = cycle(fake)
    report = sched.run_once()
    sched.run_once()

    assert report.side_counts.get("queue_objects_applied") == 1
    assert ClusterQueue.objects.get().name == "team"
    assert LocalQueue.objects.get().cluster_queue.name == "team"
    # The cluster's PriorityClasses come along with its WorkloadPriorityClasses.
    kinds = set(PriorityClass.objects.values_list("kind", "name"))
    assert {("WorkloadPriorityClass", "urgent"), ("PriorityClass", "system-node-critical")} <= kinds
    # 8 GPUs asked of a quota of 4: the urgent one goes, the other waits, told why.
    assert node_of(fake, "late-but-urgent") == "gpu-a"
    assert node_of(fake, "first") is None
    message = scheduled_message(fake, "first")
    assert "WaitingForQuota" in message and "ClusterQueue team" in message
    source = QueueSource.objects.get()
    assert (source.kind, source.error) == ("cluster", "") and source.applied_at is not None


def test_a_local_queue_deleted_in_the_cluster_goes_away_and_a_cluster_queue_waits_for_its_work(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    kueue_objects(fake)
    fake.add_pod(queued_pod("running", 2))
    sched = cycle(fake)
    sched.run_once()
    assert node_of(fake, "running") == "gpu-a"

    delete(fake, "localqueues", "team", NS)
    sched.run_once()
    assert not LocalQueue.objects.exists()
    # Its admitted workload keeps its quota (Kueue: a workload holds its admission); a new pod
    # naming the queue waits, Inadmissible.
    admitted = Workload.objects.get(pods__name="running")
    assert admitted.state == Workload.State.ADMITTED
    assert admitted.cluster_queue is not None and admitted.cluster_queue.name == "team"
    fake.add_pod(queued_pod("later", 1))
    sched.run_once()
    assert node_of(fake, "later") is None
    assert "LocalQueue ml-team/team does not exist" in scheduled_message(fake, "later")

    # The ClusterQueue and its flavor gone too: kept, admitting nothing, while its workload holds
    # quota in it; removed once that is gone.
    delete(fake, "clusterqueues", "team")
    delete(fake, "resourceflavors", "h100")
    sched.run_once()
    held = ClusterQueue.objects.get(name="team")
    assert held.stop_policy == "Hold"
    assert ResourceFlavor.objects.filter(name="h100").exists()
    assert any("ClusterQueue team is gone" in note for note in QueueSource.objects.get().notes)
    fake.delete_pod(NS, "running")
    sched.run_once()
    sched.run_once()
    assert not ClusterQueue.objects.exists() and not ResourceFlavor.objects.exists()


def test_a_broken_object_is_reported_and_the_last_good_queues_stay(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    kueue_objects(fake, gpus=4)
    sched = cycle(fake)
    sched.run_once()
    assert refused_gauge() == 0

    # An admin adds admission checks, which gpusched refuses (nothing would answer them).
    patch(fake, {"admissionChecks": ["provisioning"]})
    fake.add_pod(queued_pod("in-quota", 2))
    fake.add_pod(queued_pod("beyond", 4))
    report = sched.run_once()
    sched.run_once()

    assert report.side_counts.get("queue_objects_refused") == 1
    source = QueueSource.objects.get()
    assert "admissionChecks" in source.error and "ClusterQueue team" in source.error
    assert source.error_since is not None
    assert refused_gauge() == 1
    # The last good queue still holds: 4 GPUs, so the one pod is placed and the other waits.
    assert node_of(fake, "in-quota") == "gpu-a"
    assert node_of(fake, "beyond") is None
    assert "WaitingForQuota" in scheduled_message(fake, "beyond")

    # Fixed in the cluster, with more quota: applied, the error cleared.
    patch(fake, {"admissionChecks": None, **cluster_queue(gpus=8)["spec"]})
    sched.run_once()
    sched.run_once()
    assert QueueSource.objects.get().error == ""
    assert refused_gauge() == 0
    assert node_of(fake, "beyond") == "gpu-a"


def test_a_local_queue_naming_no_cluster_queue_is_left_out_and_noted(
    fake: SimulatedKubernetes,
) -> None:
    kueue_objects(fake)
    create(fake, "localqueues", local_queue("orphan", cq="nowhere"))
    cycle(fake).run_once()
    assert list(LocalQueue.objects.values_list("name", flat=True)) == ["team"]
    (note,) = QueueSource.objects.get().notes
    assert "LocalQueue ml-team/orphan names ClusterQueue 'nowhere'" in note


def test_with_kueue_crds_the_cluster_is_the_one_source(fake: SimulatedKubernetes) -> None:
    kueue_objects(fake)
    sched = cycle(fake)
    sched.run_once()
    # applyqueues meanwhile: replaced at the next full resync (a new leader's term, or every
    # resync_s), as the cluster does not have it.
    services.queues_apply(config=parse_documents([cluster_queue("extra")]))
    sched.run_once()
    assert ClusterQueue.objects.filter(name="extra").exists()  # nothing changed in the cluster
    side_of(sched).resync()
    sched.run_once()
    assert list(ClusterQueue.objects.values_list("name", flat=True)) == ["team"]


def test_without_kueue_crds_the_applied_queues_are_kept(fake: SimulatedKubernetes) -> None:
    fake.kueue_versions = ()  # a cluster without Kueue
    services.queues_apply(
        config=parse_documents(
            [flavor(), cluster_queue(), local_queue()],
        )
    )
    report = cycle(fake).run_once()
    assert "queue_objects_applied" not in report.side_counts
    assert ClusterQueue.objects.get().name == "team"
    assert not QueueSource.objects.exists()  # no row: the database is the source


def test_an_older_kueue_is_read_at_v1beta1(fake: SimulatedKubernetes) -> None:
    fake.kueue_versions = ("v1beta1",)
    create(fake, "resourceflavors", flavor(), version="v1beta1")
    queue = cluster_queue()
    queue["spec"]["cohort"] = "org"  # v1beta1's name for cohortName
    create(fake, "clusterqueues", queue, version="v1beta1")
    create(fake, "localqueues", local_queue(), version="v1beta1")
    cycle(fake).run_once()
    assert ClusterQueue.objects.get().cohort == "org"
    assert LocalQueue.objects.filter(namespace=NS, name="team").exists()


MANAGER_CONFIG = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
health: {healthProbeBindAddress: ':8081'}
integrations:
  frameworks: [batch/job, pod]
admissionFairSharing:
  usageHalfLifeTime: 24h
  usageSamplingInterval: 1m
  resourceWeights: {nvidia.com/gpu: 2}
"""


def test_admission_fair_sharing_comes_from_kueues_manager_config_map(
    fake: SimulatedKubernetes,
) -> None:
    kueue_objects(fake)
    fake.add_namespace("kueue-system")
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kueue-manager-config", "namespace": "kueue-system"},
        "data": {"controller_manager_config.yaml": MANAGER_CONFIG},
    }
    fake.put("configmaps", config_map)
    sched = cycle(fake, kueue_config="kueue-system/kueue-manager-config")
    sched.run_once()
    # Only admissionFairSharing is read; the rest configures Kueue's own process.
    settings = AdmissionFairSharingSettings.objects.get()
    assert (settings.usage_half_life_s, settings.usage_sampling_interval_s) == (86400.0, 60.0)
    assert settings.resource_weights == {"nvidia.com/gpu": 2.0}

    broken = yaml.safe_load(MANAGER_CONFIG)
    broken["admissionFairSharing"]["usageSamplingInterval"] = "0s"
    config_map["data"] = {"controller_manager_config.yaml": yaml.safe_dump(broken)}
    fake.put("configmaps", config_map)
    sched.run_once()
    assert "usageSamplingInterval must be greater than 0" in QueueSource.objects.get().error
    assert AdmissionFairSharingSettings.objects.get().usage_sampling_interval_s == 60.0

    fake.delete_object("configmaps", "kueue-system", "kueue-manager-config")
    sched.run_once()
    assert "ConfigMap kueue-system/kueue-manager-config" in QueueSource.objects.get().error
