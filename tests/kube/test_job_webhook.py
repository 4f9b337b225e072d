"""The mutating admission webhook for batch/v1 Jobs on the web process (kube.webhook), posted
AdmissionReviews as kube-apiserver sends them: a Job naming a managed queue is answered with a
JSONPatch suspending it (and, created so on the simulated API, becomes a workload that is
resumed once admitted); an unlabelled one is allowed untouched; a malformed review is a 400 that
names the field."""

from __future__ import annotations

import base64
import copy
import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.test import Client
from kubernetes import client

from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import Workload
from sim.kubernetes.patches import json_patch
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.dashboard.servers import web_server
from tests.kube import objects
from tests.kube.helpers import Clock, gpusched_cycle
from tests.kube.tls import Authority

pytestmark = [pytest.mark.django_db]

URL = "/webhooks/mutate-batch-v1-job"
QUEUES = """
kind: ResourceFlavor
metadata: {name: any}
---
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: any
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
---
kind: LocalQueue
metadata: {name: team, namespace: ml-team}
spec: {clusterQueue: team}
"""


def job_object(labels: dict[str, str] | None) -> dict[str, Any]:
    """A Job as kube-apiserver hands it to a mutating webhook: defaulted, not yet stored (no
    uid, no resourceVersion)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "train",
            "namespace": "ml-team",
            "labels": labels or {},
            "creationTimestamp": None,
        },
        "spec": {
            "parallelism": 1,
            "completions": 1,
            "backoffLimit": 6,
            "completionMode": "NonIndexed",
            "suspend": False,
            "manualSelector": False,
            "podReplacementPolicy": "TerminatingOrFailed",
            "template": {
                "metadata": {"creationTimestamp": None},
                "spec": {
                    "schedulerName": "gpusched",
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "containers": [
                        {
                            "name": "train",
                            "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                            "resources": {
                                "limits": {"nvidia.com/gpu": "2"},
                                "requests": {"nvidia.com/gpu": "2"},
                            },
                        }
                    ],
                },
            },
        },
        "status": {},
    }


def admission_review(obj: dict[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview with every field kube-apiserver sends."""
    kind = {"group": "batch", "version": "v1", "kind": "Job"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": kind,
            "resource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "requestKind": kind,
            "requestResource": {"group": "batch", "version": "v1", "resource": "jobs"},
            "name": "train",
            "namespace": "ml-team",
            "operation": operation,
            "userInfo": {"username": "alice", "groups": ["system:authenticated"]},
            "object": obj,
            "oldObject": None,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def post(body: Any) -> Any:
    raw = body if isinstance(body, bytes) else json.dumps(body)
    return Client().post(URL, data=raw, content_type="application/json")


@pytest.fixture
def queues() -> None:
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))


def test_a_job_naming_a_managed_queue_is_suspended(queues: None) -> None:
    review = admission_review(job_object({"kueue.x-k8s.io/queue-name": "team"}))
    response = post(review)
    assert response.status_code == 200
    answer = response.json()
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    assert answer["response"]["uid"] == review["request"]["uid"]
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(answer["response"]["patch"]))
    assert patch == [{"op": "add", "path": "/spec/suspend", "value": True}]


@pytest.mark.postgres
def test_the_suspended_job_becomes_a_workload_and_runs_once_admitted(
    queues: None, fake: SimulatedKubernetes
) -> None:
    """kube-apiserver applies the patch and stores the Job; gpusched then queues and resumes it."""
    fake.kueue_versions = ()
    fake.add_namespace("ml-team")
    fake.add_node(objects.node("gpu-a"))
    obj = job_object({"kueue.x-k8s.io/queue-name": "team"})
    answer = post(admission_review(obj)).json()["response"]
    stored = json_patch(copy.deepcopy(obj), json.loads(base64.b64decode(answer["patch"])))
    stored["metadata"].pop("creationTimestamp")
    stored["spec"]["template"]["metadata"].pop("creationTimestamp")
    stored.pop("status")
    batch: Any = client.BatchV1Api(fake.api_client())
    assert batch.create_namespaced_job("ml-team", stored).spec.suspend is True
    clock = Clock()
    cycle = gpusched_cycle(fake, clock)
    for _ in range(3):
        cycle.run_once()
        clock.advance(11)
    assert Workload.objects.get(kube_job__name="train").state in ("Admitted", "Running")
    assert batch.read_namespaced_job("train", "ml-team").spec.suspend is False


def test_an_unlabelled_job_is_allowed_without_a_patch(queues: None) -> None:
    answer = post(admission_review(job_object(None))).json()["response"]
    assert answer == {"uid": "705ab4f5-6393-11e8-b7cc-42010a800002", "allowed": True}


def test_a_job_naming_a_queue_gpusched_does_not_have_runs_unqueued_with_a_warning(
    queues: None,
) -> None:
    answer = post(admission_review(job_object({"kueue.x-k8s.io/queue-name": "nope"})))
    response = answer.json()["response"]
    assert response["allowed"] is True and "patch" not in response
    assert response["warnings"] == [
        "LocalQueue ml-team/nope does not exist in gpusched: the Job is not queued"
    ]


def test_a_jobsets_child_job_and_an_update_are_left_alone(queues: None) -> None:
    child = job_object({"kueue.x-k8s.io/queue-name": "team"})
    child["metadata"]["ownerReferences"] = [
        {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u"}
        | {"controller": True}
    ]
    assert "patch" not in post(admission_review(child)).json()["response"]
    labelled = job_object({"kueue.x-k8s.io/queue-name": "team"})
    assert "patch" not in post(admission_review(labelled, "UPDATE")).json()["response"]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r.pop("request"), "request: required"),
        (lambda r: r["request"].pop("uid"), "request.uid: required"),
        (lambda r: r.update(apiVersion="admission.k8s.io/v1beta1"), "apiVersion, kind"),
        (lambda r: r["request"].update(kind={"kind": "Pod"}), "request.kind"),
        (lambda r: r["request"]["object"].pop("spec"), "request.object.spec: required"),
        (
            lambda r: r["request"]["object"]["metadata"].update(labels=["x"]),
            "request.object.metadata.labels",
        ),
    ],
)
def test_a_malformed_review_is_a_400_naming_the_field(change: Any, field: str) -> None:
    review = admission_review(job_object({"kueue.x-k8s.io/queue-name": "team"}))
    change(review)
    response = post(review)
    assert response.status_code == 400
    assert response.json()["error"].startswith(field)


def test_a_body_that_is_not_json_is_a_400() -> None:
    response = post(b"{not json")
    assert response.status_code == 400 and response.json()["error"]


@pytest.mark.slow  # starts a web process (uvicorn and Django): 5-17 s with the machine's load
@pytest.mark.django_db(transaction=True)
def test_the_web_process_serves_it_over_tls(tmp_path: Path) -> None:
    """`runweb --tls-cert --tls-key`, as deploy/web.yaml's container `webhook` runs it: the
    review over HTTPS, the server's certificate checked against its CA (as caBundle is)."""
    authority = Authority("webhook-ca", tmp_path)
    served = authority.issue("gpusched-webhook", server=True)
    context = ssl.create_default_context(cafile=authority.cert)
    body = json.dumps(admission_review(job_object(None))).encode()
    with web_server(tls=(served.cert, served.key)) as base:
        assert base.startswith("https://")
        request = urllib.request.Request(
            f"{base}{URL}",
            data=body,
            headers={"Content-Type": "application/json", "Host": "localhost"},
        )
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            answer = json.loads(response.read())
    assert answer["response"]["allowed"] is True
