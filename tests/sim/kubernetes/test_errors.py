"""Every error code of the simulated API server through the official client, with the API
server's Status bodies (kind Status, reason, code, details)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import client_for, pod, raw, status


def test_404_for_a_missing_object_names_it_in_the_api_servers_words(
    core: Any,
) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_pod("nope", "ml-team")
    assert caught.value.status == 404
    assert status(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }


def test_404_for_a_group_resource_carries_the_group(kube: SimulatedKubernetes) -> None:
    coordination = client_for(client.CoordinationV1Api, kube)
    with pytest.raises(ApiException) as caught:
        coordination.read_namespaced_lease("x", "ml-team")
    body = status(caught.value)
    assert body["message"] == 'leases.coordination.k8s.io "x" not found'
    assert body["details"] == {"name": "x", "group": "coordination.k8s.io", "kind": "leases"}


def test_404_for_a_missing_namespace_and_an_unknown_path(
    kube: SimulatedKubernetes, core: Any
) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("no-such-ns", pod("p"))
    assert caught.value.status == 404
    assert status(caught.value)["message"] == 'namespaces "no-such-ns" not found'
    code, body = raw(kube, "GET", "/apis/example.com/v1/widgets")
    assert code == 404 and body["message"] == "the server could not find the requested resource"
    assert raw(kube, "GET", "/not-an-api")[0] == 404


def test_409_already_exists_and_conflict_on_a_stale_resource_version(
    core: Any,
) -> None:
    created = core.create_namespaced_pod("ml-team", pod("p"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("ml-team", pod("p"))
    assert caught.value.status == 409
    assert status(caught.value)["reason"] == "AlreadyExists"
    assert status(caught.value)["message"] == 'pods "p" already exists'

    created.metadata.labels = {"a": "1"}
    core.replace_namespaced_pod("p", "ml-team", created)  # moves the resourceVersion on
    created.metadata.labels = {"a": "2"}
    with pytest.raises(ApiException) as caught:
        core.replace_namespaced_pod("p", "ml-team", created)  # still the old version
    body = status(caught.value)
    assert (caught.value.status, body["reason"]) == (409, "Conflict")
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "p": the object has been modified; please apply '
        "your changes to the latest version and try again"
    )


def test_409_for_a_failed_delete_precondition(core: Any) -> None:
    core.create_namespaced_pod("ml-team", pod("p"))
    options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="other"))
    with pytest.raises(ApiException) as caught:
        core.delete_namespaced_pod("p", "ml-team", body=options)
    assert caught.value.status == 409
    assert "Precondition failed: UID in precondition: other" in status(caught.value)["message"]


def test_422_invalid_names_every_field_with_causes(core: Any) -> None:
    body = {"metadata": {"name": "Bad_Name"}, "spec": {"containers": [{"name": "main"}]}}
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("ml-team", body)
    assert caught.value.status == 422
    doc = status(caught.value)
    assert doc["reason"] == "Invalid"
    assert doc["message"].startswith('Pod "Bad_Name" is invalid: [metadata.name: Invalid value')
    assert doc["details"]["kind"] == "Pod" and doc["details"]["name"] == "Bad_Name"
    assert {(c["field"], c["reason"]) for c in doc["details"]["causes"]} == {
        ("metadata.name", "FieldValueInvalid"),
        ("spec.containers[0].image", "FieldValueRequired"),
    }


def test_422_for_a_required_field_of_a_group_kind(kube: SimulatedKubernetes) -> None:
    body = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b"},
        "spec": {"minAvailable": 1, "maxUnavailable": 1},
    }
    code, doc = raw(kube, "POST", "/apis/policy/v1/namespaces/ml-team/poddisruptionbudgets", body)
    assert code == 422
    assert doc["message"].startswith('PodDisruptionBudget.policy "b" is invalid: spec: Invalid')
    assert doc["details"]["group"] == "policy"
    assert "cannot be both set" in doc["details"]["causes"][0]["message"]


def test_400_bad_selectors_and_bodies(kube: SimulatedKubernetes, core: Any) -> None:
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("ml-team", field_selector="spec.containers=x")
    assert caught.value.status == 400
    assert status(caught.value)["message"] == "field label not supported: spec.containers"
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("ml-team", label_selector="a in (b")
    assert caught.value.status == 400 and status(caught.value)["reason"] == "BadRequest"
    code, doc = raw(kube, "POST", "/api/v1/namespaces/ml-team/pods", b"{not json")
    assert code == 400 and doc["message"].startswith("couldn't get version/kind; json parse error")
    code, doc = raw(kube, "POST", "/api/v1/namespaces/ml-team/pods", {"kind": "Node"})
    assert code == 400 and "does not match the expected kind (Pod)" in doc["message"]


def test_403_for_an_unknown_priority_class_and_a_terminating_namespace(
    kube: SimulatedKubernetes, core: Any
) -> None:
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("ml-team", pod("p", priorityClassName="missing"))
    assert caught.value.status == 403
    assert status(caught.value)["message"] == (
        'pods "p" is forbidden: no PriorityClass with name missing was found'
    )
    kube.add_namespace("leaving")
    core.create_namespaced_pod("leaving", pod("keep", nodeName="n1"))  # held by its grace period
    core.delete_namespace("leaving")
    assert core.read_namespace("leaving").status.phase == "Terminating"
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("leaving", pod("late"))
    assert caught.value.status == 403
    assert "because it is being terminated" in status(caught.value)["message"]


def test_405_and_415(kube: SimulatedKubernetes, core: Any) -> None:
    core.create_namespaced_pod("ml-team", pod("p"))
    code, doc = raw(kube, "GET", "/api/v1/namespaces/ml-team/pods/p/binding")
    assert (code, doc["reason"]) == (405, "MethodNotAllowed")
    kueue = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
    raw(kube, "POST", kueue, {"metadata": {"name": "h100"}, "spec": {}})
    code, doc = raw(
        kube,
        "PATCH",
        f"{kueue}/h100",
        {"spec": {"nodeLabels": {"a": "b"}}},
        content_type="application/strategic-merge-patch+json",
    )
    assert code == 415 and doc["reason"] == "UnsupportedMediaType"
    assert doc["message"] == (
        "the body of the request was in an unknown format - accepted media types include: "
        "application/json-patch+json, application/merge-patch+json"
    )


def test_410_for_an_expired_continue_token(kube: SimulatedKubernetes, core: Any) -> None:
    for k in range(3):
        core.create_namespaced_pod("ml-team", pod(f"p{k}"))
    first = core.list_namespaced_pod("ml-team", limit=1)
    core.create_namespaced_pod("ml-team", pod("later"))
    kube.compact()  # the version the list was read at is gone
    with pytest.raises(ApiException) as caught:
        core.list_namespaced_pod("ml-team", limit=1, _continue=first.metadata._continue)
    assert (caught.value.status, status(caught.value)["reason"]) == (410, "Expired")
    assert status(caught.value)["message"].startswith("The provided continue parameter is too old")


def test_429_and_500_from_eviction_budgets(kube: SimulatedKubernetes, core: Any) -> None:
    running = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    kube.add_pod(
        {
            **pod(
                "web", metadata={"namespace": "ml-team", "labels": {"app": "web"}}, nodeName="n1"
            ),
            "status": running,
        }
    )
    policy = client_for(client.PolicyV1Api, kube)
    budget = {
        "metadata": {"name": "web"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}},
    }
    policy.create_namespaced_pod_disruption_budget("ml-team", budget)
    eviction = client.V1Eviction(metadata=client.V1ObjectMeta(name="web", namespace="ml-team"))
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_eviction("web", "ml-team", eviction)
    assert caught.value.status == 429
    assert status(caught.value) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "Cannot evict pod as it would violate the pod's disruption budget.",
        "reason": "TooManyRequests",
        "details": {
            "causes": [
                {
                    "reason": "DisruptionBudget",
                    "message": "The disruption budget web needs 1 healthy pods and has 1 currently",
                }
            ]
        },
        "code": 429,
    }
    policy.create_namespaced_pod_disruption_budget(
        "ml-team", {**budget, "metadata": {"name": "web-2"}}
    )
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_eviction("web", "ml-team", eviction)
    assert caught.value.status == 500
    assert status(caught.value)["message"] == (
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
        "support."
    )
