"""batch/v1 Jobs as the API server serves them: discovery, validation, which template changes are
allowed when (Kueue's way of placing a suspended Job), the status rules, and deletion with each
propagation policy (a batch/v1 delete that names none orphans the pods, with a warning)."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.kubernetes.launch import SimulatedCluster
from tests.sim.kubernetes.helpers import Clock, client_for, status
from tests.sim.kubernetes.jobs import NAMESPACE, batch, bind_all, job, pods_of

TRACKING = "batch.kubernetes.io/job-tracking"
INDEX = "batch.kubernetes.io/job-completion-index"


def test_served_at_batch_v1_with_discovery(sim: SimulatedCluster) -> None:
    api = client_for(client.ApisApi, sim.kube)
    groups = {g.name: g for g in api.get_api_versions().groups}
    assert groups["batch"].preferred_version.group_version == "batch/v1"
    resources = client_for(client.BatchV1Api, sim.kube).get_api_resources()
    names = {r.name: r for r in resources.resources}
    assert names["jobs"].kind == "Job" and names["jobs"].namespaced
    assert "jobs/status" in names
    batch(sim).create_namespaced_job(NAMESPACE, job("one", completions=1))
    listed = batch(sim).list_namespaced_job(NAMESPACE, field_selector="status.successful=0")
    assert [j.metadata.name for j in listed.items] == ["one"]
    assert batch(sim).list_job_for_all_namespaces(field_selector="status.successful=1").items == []


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (lambda b: b["spec"]["template"]["spec"].pop("restartPolicy"),
         "spec.template.spec.restartPolicy", 'Required value: valid values: "OnFailure", "Never"'),
        (lambda b: b["spec"].update(completionMode="Indexed", parallelism=2),
         "spec.completions", "Required value: when completion mode is Indexed"),
        (lambda b: b["spec"].update(parallelism=-1),
         "spec.parallelism", "must be greater than or equal to 0"),
        (lambda b: b["spec"].update(manualSelector=True, selector={"matchLabels": {"a": "b"}}),
         "spec.template.metadata.labels", "`selector` does not match template `labels`"),
        (lambda b: b["spec"]["template"]["spec"]["containers"][0].pop("image"),
         "spec.template.spec.containers[0].image", "Required value"),
    ],
)  # fmt: skip
def test_invalid_jobs_are_refused_naming_the_field(
    sim: SimulatedCluster, change: Any, field: str, message: str
) -> None:
    body = job("bad")
    change(body)
    with pytest.raises(ApiException) as raised:
        batch(sim).create_namespaced_job(NAMESPACE, body)
    doc = status(raised.value)
    assert raised.value.status == 422 and doc["reason"] == "Invalid"
    assert any(c["field"] == field and message in c["message"] for c in doc["details"]["causes"])


def test_the_template_is_mutable_only_while_suspended_and_never_started(
    sim: SimulatedCluster, clock: Clock
) -> None:
    jobs = batch(sim)
    jobs.create_namespaced_job(NAMESPACE, job("held", suspend=True))
    directives = {"nodeSelector": {"rack": "r1"}, "tolerations": [{"operator": "Exists"}]}
    labels = {"labels": {"kueue.x-k8s.io/podset": "main"}}
    rack = {"spec": {"template": {"spec": directives, "metadata": labels}}}
    jobs.patch_namespaced_job("held", NAMESPACE, rack)
    image = {"spec": {"template": {"spec": {"containers": [{"name": "train", "image": "other"}]}}}}
    with pytest.raises(ApiException) as raised:
        jobs.patch_namespaced_job("held", NAMESPACE, image)
    assert raised.value.status == 422
    assert "spec.template: Invalid value" in status(raised.value)["message"]
    assert "field is immutable" in status(raised.value)["message"]

    jobs.patch_namespaced_job("held", NAMESPACE, {"spec": {"suspend": False}})
    jobs.patch_namespaced_job("held", NAMESPACE, {"spec": {"suspend": True}})
    elsewhere = {"spec": {"template": {"spec": {"nodeSelector": {"rack": "r2"}}}}}
    with pytest.raises(ApiException) as raised:  # it started: startTime is set
        jobs.patch_namespaced_job("held", NAMESPACE, elsewhere)
    assert raised.value.status == 422

    # What Kueue does when it suspends a Job: clear status.startTime (allowed while suspended),
    # after which the scheduling directives may change again.
    jobs.patch_namespaced_job_status("held", NAMESPACE, {"status": {"startTime": None}})
    jobs.patch_namespaced_job("held", NAMESPACE, elsewhere)
    assert jobs.read_namespaced_job("held", NAMESPACE).spec.template.spec.node_selector == {
        "rack": "r2"
    }
    jobs.patch_namespaced_job("held", NAMESPACE, {"spec": {"suspend": False}})
    clock.advance(5)
    with pytest.raises(ApiException) as raised:
        jobs.patch_namespaced_job_status("held", NAMESPACE, {"status": {"startTime": None}})
    assert raised.value.status == 422
    assert "startTime cannot be removed for unsuspended job" in status(raised.value)["message"]
    assert all(p["spec"]["nodeSelector"] == {"rack": "r2"} for p in pods_of(sim, "held"))


def _delete(sim: SimulatedCluster, name: str, query: str = "") -> tuple[int, list[str]]:
    """DELETE with the raw HTTP answer's Warning headers (the client does not surface them)."""
    connection = http.client.HTTPConnection("127.0.0.1", sim.kube.server.port, timeout=10)
    connection.request("DELETE", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{name}{query}")
    response = connection.getresponse()
    response.read()
    connection.close()
    return response.status, response.headers.get_all("Warning") or []


def _running(sim: SimulatedCluster, name: str, pods: int) -> list[str]:
    batch(sim).create_namespaced_job(NAMESPACE, job(name, parallelism=pods, completions=pods))
    bind_all(sim)
    sim.run_once()
    return sorted(p["metadata"]["name"] for p in pods_of(sim, name))


def test_a_delete_without_a_policy_orphans_the_pods_with_a_warning(sim: SimulatedCluster) -> None:
    names = _running(sim, "keep", 2)
    code, warnings = _delete(sim, "keep")
    assert code == 200
    assert warnings == [
        '299 - "child pods are preserved by default when jobs are deleted; set '
        "propagationPolicy=Background to remove them or set propagationPolicy=Orphan to "
        'suppress this warning"'
    ]
    left = {p["metadata"]["name"]: p for p in sim.kube.objects("pods", NAMESPACE)}
    assert sorted(left) == names
    for pod in left.values():  # orphaned: no owner, no tracking finalizer, still running
        assert not pod["metadata"].get("ownerReferences")
        assert TRACKING not in (pod["metadata"].get("finalizers") or [])
        assert pod["status"]["phase"] == "Running"
    assert _delete(sim, "keep")[0] == 404


def test_background_deletion_removes_the_job_then_its_pods(
    sim: SimulatedCluster, clock: Clock
) -> None:
    _running(sim, "gone", 2)
    code, warnings = _delete(sim, "gone", "?propagationPolicy=Background")
    assert (code, warnings) == (200, [])
    with pytest.raises(ApiException):
        batch(sim).read_namespaced_job("gone", NAMESPACE)
    pods = sim.kube.objects("pods", NAMESPACE)
    assert len(pods) == 2 and all(p["metadata"].get("deletionTimestamp") for p in pods)
    clock.advance(31)
    sim.run_once()
    assert sim.kube.objects("pods", NAMESPACE) == []


def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(
    sim: SimulatedCluster, clock: Clock
) -> None:
    _running(sim, "fg", 2)
    body = client.V1DeleteOptions(propagation_policy="Foreground")
    batch(sim).delete_namespaced_job("fg", NAMESPACE, body=body)
    held = batch(sim).read_namespaced_job("fg", NAMESPACE)
    assert held.metadata.deletion_timestamp is not None
    assert held.metadata.finalizers == ["foregroundDeletion"]
    assert len(pods_of(sim, "fg")) == 2  # terminating, and no replacements
    clock.advance(31)
    sim.run_once()
    assert pods_of(sim, "fg") == []
    with pytest.raises(ApiException) as raised:
        batch(sim).read_namespaced_job("fg", NAMESPACE)
    assert raised.value.status == 404


def test_orphan_deletion_named_explicitly_warns_nothing(sim: SimulatedCluster) -> None:
    _running(sim, "kept", 1)
    code, warnings = _delete(sim, "kept", "?propagationPolicy=Orphan")
    assert (code, warnings) == (200, [])
    (pod,) = sim.kube.objects("pods", NAMESPACE)
    assert pod["status"]["phase"] == "Running" and not pod["metadata"].get("ownerReferences")


def test_the_job_table_kubectl_reads(sim: SimulatedCluster, clock: Clock) -> None:
    batch(sim).create_namespaced_job(NAMESPACE, job("t", parallelism=2, completions=4))
    clock.advance(90)
    connection = http.client.HTTPConnection("127.0.0.1", sim.kube.server.port, timeout=10)
    connection.request(
        "GET",
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs",
        headers={"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"},
    )
    table: dict[str, Any] = json.loads(connection.getresponse().read())
    connection.close()
    assert [c["name"] for c in table["columnDefinitions"]] == [
        "Name", "Status", "Completions", "Duration", "Age", "Containers", "Images", "Selector"
    ]  # fmt: skip
    (row,) = table["rows"]
    uid = sim.kube.get_object("jobs", NAMESPACE, "t")["metadata"]["uid"]
    assert row["cells"] == [
        "t", "Running", "0/4", "90s", "90s", "train", "nvcr.io/nvidia/pytorch:24.05-py3",
        f"batch.kubernetes.io/controller-uid={uid}",
    ]  # fmt: skip
    assert row["object"]["kind"] == "PartialObjectMetadata"


# kubernetes-sigs/kueue site/static/examples/tas/sample-job-required.yaml, as Kueue's Topology
# Aware Scheduling documentation writes it.
KUEUE_TAS_SAMPLE = """
apiVersion: batch/v1
kind: Job
metadata:
  generateName: tas-sample-required
  labels:
    kueue.x-k8s.io/queue-name: tas-user-queue
spec:
  parallelism: 10
  completions: 10
  completionMode: Indexed
  template:
    metadata:
      annotations:
        kueue.x-k8s.io/podset-required-topology: "cloud.provider.com/topology-rack"
    spec:
      containers:
      - name: dummy-job
        image: registry.k8s.io/e2e-test-images/agnhost:2.53
        args: ["pause"]
        resources:
          requests:
            cpu: "1"
            memory: "200Mi"
      restartPolicy: Never
"""


def test_kueues_tas_sample_job_held_placed_and_released(sim: SimulatedCluster) -> None:
    body = yaml.safe_load(KUEUE_TAS_SAMPLE)
    body["spec"]["suspend"] = True  # what Kueue's Job webhook sets on a queued Job
    created = batch(sim).create_namespaced_job(NAMESPACE, body)
    name = created.metadata.name
    assert name.startswith("tas-sample-required") and len(name) == len("tas-sample-required") + 5
    assert created.metadata.labels == {"kueue.x-k8s.io/queue-name": "tas-user-queue"}
    assert pods_of(sim, name) == []
    # Admission: the flavor's node labels into the template, then unsuspend, as Kueue does.
    flavor = {"cloud.provider.com/node-group": "tas-group"}
    batch(sim).patch_namespaced_job(
        name, NAMESPACE, {"spec": {"template": {"spec": {"nodeSelector": flavor}}}}
    )
    batch(sim).patch_namespaced_job(name, NAMESPACE, {"spec": {"suspend": False}})
    pods = pods_of(sim, name)
    assert sorted(int(p["metadata"]["labels"][INDEX]) for p in pods) == list(range(10))
    for pod in pods:
        annotations = pod["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/podset-required-topology"] == (
            "cloud.provider.com/topology-rack"
        )
        assert pod["spec"]["nodeSelector"] == flavor
        assert pod["spec"]["containers"][0]["args"] == ["pause"]
