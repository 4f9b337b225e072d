"""Garbage collection by ownerReferences, namespace termination, scheduling gates and binding,
PodDisruptionBudget status and eviction."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import client_for, pod, status

READY = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}


def owned_by(owner: Any, *, block: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
        **({"blockOwnerDeletion": True} if block else {}),
    }


def names(core: Any) -> list[str]:
    return [p.metadata.name for p in core.list_namespaced_pod("ml-team").items]


@pytest.fixture
def parent(core: Any) -> Any:
    return core.create_namespaced_config_map("ml-team", {"metadata": {"name": "job"}, "data": {}})


def test_deleting_a_parent_deletes_its_children(core: Any, parent: Any) -> None:
    for name in ("w0", "w1"):
        core.create_namespaced_pod(
            "ml-team", pod(name, metadata={"ownerReferences": [owned_by(parent)]})
        )
    core.create_namespaced_pod("ml-team", pod("unrelated"))
    core.delete_namespaced_config_map("job", "ml-team")
    assert names(core) == ["unrelated"]


def test_bound_children_terminate_gracefully_and_orphans_stay(core: Any, parent: Any) -> None:
    core.create_namespaced_pod(
        "ml-team", pod("w0", nodeName="n1", metadata={"ownerReferences": [owned_by(parent)]})
    )
    core.delete_namespaced_config_map("job", "ml-team")
    assert core.read_namespaced_pod("w0", "ml-team").metadata.deletion_timestamp is not None

    other = core.create_namespaced_config_map("ml-team", {"metadata": {"name": "job2"}})
    core.create_namespaced_pod(
        "ml-team", pod("w1", metadata={"ownerReferences": [owned_by(other)]})
    )
    core.delete_namespaced_config_map("job2", "ml-team", propagation_policy="Orphan")
    orphan = core.read_namespaced_pod("w1", "ml-team")
    assert orphan.metadata.owner_references is None and orphan.metadata.deletion_timestamp is None


def test_a_child_with_another_live_owner_only_loses_the_dangling_reference(
    core: Any, parent: Any
) -> None:
    second = core.create_namespaced_config_map("ml-team", {"metadata": {"name": "other"}})
    refs = [owned_by(parent), owned_by(second)]
    core.create_namespaced_pod("ml-team", pod("shared", metadata={"ownerReferences": refs}))
    core.delete_namespaced_config_map("job", "ml-team")
    kept = core.read_namespaced_pod("shared", "ml-team")
    assert [r.name for r in kept.metadata.owner_references] == ["other"]


def test_foreground_deletion_waits_for_blocking_dependents(core: Any, parent: Any) -> None:
    core.create_namespaced_pod(
        "ml-team",
        pod("w0", nodeName="n1", metadata={"ownerReferences": [owned_by(parent, block=True)]}),
    )
    core.delete_namespaced_config_map("job", "ml-team", propagation_policy="Foreground")
    waiting = core.read_namespaced_config_map("job", "ml-team")
    assert waiting.metadata.finalizers == ["foregroundDeletion"]
    assert waiting.metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("w0", "ml-team", grace_period_seconds=0)  # the kubelet stopped it
    with pytest.raises(ApiException) as caught:
        core.read_namespaced_config_map("job", "ml-team")
    assert caught.value.status == 404


def test_a_terminating_namespace_goes_once_empty(kube: SimulatedKubernetes, core: Any) -> None:
    kube.add_namespace("team-b")
    core.create_namespaced_pod("team-b", pod("running", nodeName="n1"))
    core.create_namespaced_config_map("team-b", {"metadata": {"name": "c"}})
    core.delete_namespace("team-b")
    assert core.read_namespace("team-b").status.phase == "Terminating"
    assert core.list_namespaced_config_map("team-b").items == []
    core.delete_namespaced_pod("running", "team-b", grace_period_seconds=0)
    assert "team-b" not in {n.metadata.name for n in core.list_namespace().items}


def binding(name: str, node: str) -> client.V1Binding:
    return client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(kind="Node", name=node),
    )


def test_a_gated_pod_cannot_be_bound_and_gates_may_only_be_removed(core: Any) -> None:
    gated = pod("gated", schedulingGates=[{"name": "kueue.x-k8s.io/admission"}])
    core.create_namespaced_pod("ml-team", gated)
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod_binding(
            "gated", "ml-team", binding("gated", "n1"), _preload_content=False
        )
    assert caught.value.status == 409
    assert status(caught.value)["message"] == (
        'Operation cannot be fulfilled on pods/binding "gated": pod gated has non-empty '
        ".spec.schedulingGates"
    )
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod(
            "gated", "ml-team", {"spec": {"schedulingGates": [{"name": "example.com/more"}]}}
        )
    assert caught.value.status == 422
    assert (
        "only deletion is allowed, but found new scheduling gate 'example.com/more'"
        in status(caught.value)["message"]
    )
    # While gated, a node selector may be added (Kueue does so when it admits the pod).
    core.patch_namespaced_pod("gated", "ml-team", {"spec": {"nodeSelector": {"pool": "h100"}}})
    core.patch_namespaced_pod("gated", "ml-team", {"spec": {"schedulingGates": None}})
    response = core.create_namespaced_pod_binding(
        "gated", "ml-team", binding("gated", "n1"), _preload_content=False
    )
    assert response.status == 201 and json.loads(response.data)["status"] == "Success"
    bound = core.read_namespaced_pod("gated", "ml-team")
    assert bound.spec.node_name == "n1" and bound.spec.node_selector == {"pool": "h100"}
    assert [(c.type, c.status) for c in bound.status.conditions] == [("PodScheduled", "True")]
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("gated", "ml-team", {"spec": {"nodeSelector": {"pool": "a100"}}})
    assert caught.value.status == 422  # no longer gated: frozen


def budget(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, **spec},
    }


def web_pods(kube: SimulatedKubernetes, count: int, *, ready: int | None = None) -> None:
    for k in range(count):
        state = READY if ready is None or k < ready else {"phase": "Running"}
        body = pod(
            f"web-{k}", nodeName="n1", metadata={"namespace": "ml-team", "labels": {"app": "web"}}
        )
        kube.add_pod({**body, "status": state})


@pytest.mark.parametrize(
    ("spec", "healthy", "expected"),
    [
        ({"minAvailable": 2}, 4, (2, 2)),  # (desiredHealthy, disruptionsAllowed)
        ({"minAvailable": "50%"}, 3, (2, 1)),  # 50% of 4, rounded up
        ({"maxUnavailable": 1}, 4, (3, 1)),
        ({"maxUnavailable": "30%"}, 4, (2, 2)),  # 30% of 4 is 1.2: 2 may be down
        ({"minAvailable": 3}, 2, (3, 0)),
    ],
)
def test_budget_status_is_computed_from_the_matching_pods(
    kube: SimulatedKubernetes, spec: dict[str, Any], healthy: int, expected: tuple[int, int]
) -> None:
    web_pods(kube, 4, ready=healthy)
    policy = client_for(client.PolicyV1Api, kube)
    policy.create_namespaced_pod_disruption_budget("ml-team", budget("b", **spec))
    found = policy.read_namespaced_pod_disruption_budget("b", "ml-team").status
    assert (found.expected_pods, found.current_healthy) == (4, healthy)
    assert (found.desired_healthy, found.disruptions_allowed) == expected
    (condition,) = found.conditions
    assert condition.type == "DisruptionAllowed"
    assert condition.status == ("True" if expected[1] else "False")


def test_eviction_spends_the_budget_then_refuses_with_429(
    kube: SimulatedKubernetes, core: Any
) -> None:
    web_pods(kube, 3)
    policy = client_for(client.PolicyV1Api, kube)
    policy.create_namespaced_pod_disruption_budget("ml-team", budget("b", maxUnavailable=1))

    def evict(name: str) -> None:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace="ml-team"))
        core.create_namespaced_pod_eviction(name, "ml-team", body)

    evict("web-0")
    evicted = core.read_namespaced_pod("web-0", "ml-team")
    assert evicted.metadata.deletion_timestamp is not None  # graceful: the kubelet stops it
    target = [c for c in evicted.status.conditions if c.type == "DisruptionTarget"]
    assert target[0].reason == "EvictionByEvictionAPI"
    after = policy.read_namespaced_pod_disruption_budget("b", "ml-team").status
    assert (after.current_healthy, after.disruptions_allowed) == (2, 0)
    with pytest.raises(ApiException) as caught:
        evict("web-1")
    assert caught.value.status == 429
    assert status(caught.value)["details"]["causes"][0]["message"] == (
        "The disruption budget b needs 2 healthy pods and has 2 currently"
    )
    assert core.read_namespaced_pod("web-1", "ml-team").metadata.deletion_timestamp is None
    with pytest.raises(ApiException) as caught:
        evict("gone")
    assert caught.value.status == 404
    core.delete_namespaced_pod("web-0", "ml-team", grace_period_seconds=0)
    kube.add_pod(
        {
            **pod(
                "web-3", nodeName="n1", metadata={"namespace": "ml-team", "labels": {"app": "web"}}
            ),
            "status": READY,
        }
    )
    evict("web-1")  # a replacement is Ready again: one disruption allowed


def test_a_pending_pod_is_evicted_without_looking_at_budgets(
    kube: SimulatedKubernetes, core: Any
) -> None:
    core.create_namespaced_pod("ml-team", pod("waiting", metadata={"labels": {"app": "web"}}))
    policy = client_for(client.PolicyV1Api, kube)
    policy.create_namespaced_pod_disruption_budget("ml-team", budget("b", minAvailable=5))
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name="waiting", namespace="ml-team"))
    core.create_namespaced_pod_eviction("waiting", "ml-team", body)
    assert names(core) == []
