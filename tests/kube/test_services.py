"""Kubernetes pods mirrored as workloads: Kueue's priority-class label and extended resources."""

from __future__ import annotations

import pytest
import yaml

from kube import services as kube_services
from kube.models import KubePod
from kube.times import parse_time
from kube.translate import PodInfo, pod_info
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import Pod, PodConstraints, Workload
from scheduling.worker import runtime_selectors
from tests.kube import objects

pytestmark = pytest.mark.django_db


def mirrored(doc):
    info = pod_info(doc)
    assert info.ask is not None
    (pod,) = kube_services.workload_mirror(name=info.name, members=[info], min_count=None)
    return pod


def test_the_priority_class_label_gives_the_workload_its_priority() -> None:
    services.queues_apply(
        config=parse_documents(
            list(
                yaml.safe_load_all("kind: WorkloadPriorityClass\nmetadata: {name: vip}\nvalue: 500")
            )
        )
    )
    doc = objects.pod("p", gpus=1, extra={"example.com/credits": "3"})
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "vip"}
    doc["spec"]["priority"] = 7  # the pod's own PriorityClass value: Kueue's label wins
    pod = mirrored(doc)
    workload = pod.workload
    assert (workload.priority, workload.priority_class_name, workload.priority_class_kind) == (
        500,
        "vip",
        "WorkloadPriorityClass",
    )
    assert pod.extended_resources == {"example.com/credits": 3}


def test_an_unknown_priority_class_label_is_refused_by_name() -> None:
    doc = objects.pod("p", gpus=1)
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "nope"}
    with pytest.raises(services.ServiceError, match="WorkloadPriorityClass 'nope' does not exist"):
        mirrored(doc)


def info_of(name: str, namespace: str, uid: str, gpus: int = 1) -> PodInfo:
    doc = objects.pod(name, namespace=namespace, gpus=gpus)
    doc["metadata"]["uid"] = uid
    return pod_info(doc)


def test_a_burst_of_pods_is_mirrored_at_once_each_as_it_would_be_alone() -> None:
    """Pods of the same name in two namespaces, one whose name a workload of its tenant has
    already: each becomes a workload of its own, linked to its own uid."""
    first = info_of("train", "ml-team", "uid-first")
    (earlier,) = kube_services.workload_mirror(name=first.name, members=[first], min_count=None)
    again = info_of("train", "ml-team", "uid-again", gpus=2)
    elsewhere = info_of("train", "vision", "uid-elsewhere", gpus=2)

    pods = kube_services.workloads_mirror(
        groups=[
            kube_services.MirrorGroup(again.name, [again]),
            kube_services.MirrorGroup(elsewhere.name, [elsewhere]),
        ]
    )

    by_uid = {pod.kube.uid: pod for pod in pods}
    assert set(by_uid) == {"uid-again", "uid-elsewhere"}
    assert by_uid["uid-again"].workload.name == "train-uid-agai"  # the uid's first 8 characters
    assert by_uid["uid-again"].workload.tenant == earlier.workload.tenant
    assert by_uid["uid-elsewhere"].workload.name == "train"
    assert by_uid["uid-elsewhere"].workload.tenant.namespace == "vision"
    assert {pod.gpus for pod in pods} == {2}


def test_mirrored_pods_share_a_constraints_row_when_theirs_agree() -> None:
    """On Kubernetes each pod of a group may differ: their node selectors and tolerations are
    stored once per distinct content (PodConstraints), not once per pod."""

    def member(k: int, zone: str) -> PodInfo:
        doc = objects.pod(f"group-{k}", gpus=1, node_selector={"zone": zone})
        doc["metadata"]["uid"] = f"uid-{k}"
        doc["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists"}]
        return pod_info(doc)

    members = [member(0, "a"), member(1, "a"), member(2, "b"), member(3, "a")]
    pods = kube_services.workload_mirror(name="group", members=members, min_count=4)

    zone = {pod.name: pod.constraints.node_selector["zone"] for pod in pods}
    assert zone == {"group-0": "a", "group-1": "a", "group-2": "b", "group-3": "a"}
    assert PodConstraints.objects.count() == 2
    assert len({pod.constraints_id for pod in pods if zone[pod.name] == "a"}) == 1


def test_a_burst_with_an_unknown_priority_class_is_refused_whole() -> None:
    good = info_of("good", "ml-team", "uid-good")
    doc = objects.pod("bad", gpus=1)
    doc["metadata"].update(uid="uid-bad", labels={"kueue.x-k8s.io/priority-class": "nope"})
    bad = pod_info(doc)
    with pytest.raises(services.ServiceError, match="'nope' does not exist"):
        kube_services.workloads_mirror(
            groups=[
                kube_services.MirrorGroup(good.name, [good]),
                kube_services.MirrorGroup(bad.name, [bad]),
            ]
        )
    assert not Workload.objects.exists() and not KubePod.objects.exists()


def test_a_pods_active_deadline_is_its_workloads_declared_limit() -> None:
    """activeDeadlineSeconds bounds the run time estimated starts assume before similar work has
    finished (issue 37); a group is bounded only when every pod declares one."""
    doc = objects.pod("p", gpus=1)
    doc["spec"]["activeDeadlineSeconds"] = 1800
    assert mirrored(doc).workload.maximum_execution_time_s == 1800
    bounded = objects.pod("a", namespace="team", gpus=1)
    bounded["metadata"]["uid"] = "u1"
    bounded["spec"]["activeDeadlineSeconds"] = 600
    members = [pod_info(bounded), info_of("b", "team", "u2")]
    pods = kube_services.workload_mirror(name="g", members=members, min_count=2)
    assert pods[0].workload.maximum_execution_time_s is None


def test_a_pod_that_ran_and_ended_between_two_looks_is_learnt_from_its_status_times() -> None:
    """The side saw the pod bound, then gone: it still ran, from status.startTime to its
    container's finishedAt, and that is the run time learnt, as the database side learns a short
    job's (issue 37: on one arrival stream the two sides learnt from different jobs)."""
    doc = objects.pod("p", gpus=1)
    started, finished = "2026-12-07T10:00:00Z", "2026-12-07T10:04:00Z"
    doc["status"] = {
        "phase": "Succeeded",
        "startTime": started,
        "containerStatuses": [
            {"name": "main", "state": {"terminated": {"exitCode": 0, "finishedAt": finished}}}
        ],
    }
    info = pod_info(doc)
    assert (info.started_at, info.finished_at) == (parse_time(started), parse_time(finished))
    pod = mirrored(doc)
    Pod.objects.filter(pk=pod.pk).update(phase=Pod.Phase.BOUND)  # bound; never seen running
    seen_gone = parse_time("2026-12-07T10:05:00Z")
    assert seen_gone is not None
    kube_services.pod_gone(
        kube_pod=KubePod.objects.get(pod=pod),
        succeeded=True,
        now=seen_gone,
        started_at=info.started_at,
        finished_at=info.finished_at,
    )
    (learnt,) = runtime_selectors.finished_runtimes()
    assert learnt.duration_s == 240.0
    assert Workload.objects.get(pk=pod.workload_id).finished_at == parse_time(finished)
