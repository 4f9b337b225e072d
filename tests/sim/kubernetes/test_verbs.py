"""Create, update, patch and delete with the API server's metadata semantics."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import Clock, client_for, pod, raw, status


def test_create_sets_the_server_fields_and_the_pod_defaults(core: Any) -> None:
    body = pod("gen", gpus=2, metadata={"generateName": "train-", "name": None})
    created = core.create_namespaced_pod("ml-team", body)
    meta = created.metadata
    assert meta.name.startswith("train-") and len(meta.name) == len("train-") + 5
    assert meta.uid and meta.resource_version and meta.generation == 1
    assert meta.creation_timestamp.isoformat() == "2026-01-05T09:00:00+00:00"
    spec = created.spec
    assert (spec.scheduler_name, spec.restart_policy, spec.priority) == (
        "default-scheduler",
        "Always",
        0,
    )
    assert spec.termination_grace_period_seconds == 30
    assert spec.containers[0].resources.requests == {"nvidia.com/gpu": "2"}  # from the limits
    assert {t.key for t in spec.tolerations} == {
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    }
    assert (created.status.phase, created.status.qos_class) == ("Pending", "BestEffort")


def test_priority_comes_from_the_priority_class(kube: SimulatedKubernetes, core: Any) -> None:
    scheduling = client_for(client.SchedulingV1Api, kube)
    scheduling.create_priority_class(
        {"metadata": {"name": "online"}, "value": 1000, "preemptionPolicy": "Never"}
    )
    created = core.create_namespaced_pod("ml-team", pod("p", priorityClassName="online"))
    assert (created.spec.priority, created.spec.preemption_policy) == (1000, "Never")
    names = {c.metadata.name for c in scheduling.list_priority_class().items}
    assert {"system-cluster-critical", "system-node-critical", "online"} <= names
    with pytest.raises(ApiException) as caught:
        scheduling.create_priority_class({"metadata": {"name": "system-mine"}, "value": 1})
    assert caught.value.status == 422


def test_updates_keep_system_metadata_and_move_generation_only_on_spec_changes(
    core: Any,
) -> None:
    created = core.create_namespaced_pod("ml-team", pod("p", nodeName="n1"))
    labelled = core.patch_namespaced_pod(
        "p", "ml-team", {"metadata": {"labels": {"a": "1"}, "uid": "forged"}}
    )
    assert labelled.metadata.uid == created.metadata.uid
    assert labelled.metadata.generation == 1
    assert int(labelled.metadata.resource_version) > int(created.metadata.resource_version)
    again = core.patch_namespaced_pod("p", "ml-team", {"metadata": {"labels": {"a": "1"}}})
    assert again.metadata.resource_version == labelled.metadata.resource_version  # a no-op
    image = core.patch_namespaced_pod(
        "p", "ml-team", {"spec": {"containers": [{"name": "main", "image": "other:1"}]}}
    )
    assert image.metadata.generation == 2 and image.spec.containers[0].image == "other:1"


def test_status_and_main_resource_ignore_each_others_fields(core: Any) -> None:
    core.create_namespaced_pod("ml-team", pod("p"))
    patched = core.patch_namespaced_pod(
        "p", "ml-team", {"metadata": {"labels": {"x": "y"}}, "status": {"phase": "Running"}}
    )
    assert patched.status.phase == "Pending" and patched.metadata.labels == {"x": "y"}
    status_patched = core.patch_namespaced_pod_status(
        "p", "ml-team", {"metadata": {"labels": {"x": "z"}}, "status": {"phase": "Running"}}
    )
    assert status_patched.status.phase == "Running" and status_patched.metadata.labels == {"x": "y"}


def test_strategic_merge_merges_conditions_by_type_and_json_patch_works(
    kube: SimulatedKubernetes, core: Any
) -> None:
    core.create_namespaced_pod("ml-team", pod("p"))
    for condition in (
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"},
        {"type": "Ready", "status": "False"},
        {"type": "PodScheduled", "status": "True"},
    ):
        core.patch_namespaced_pod_status("p", "ml-team", {"status": {"conditions": [condition]}})
    conditions = core.read_namespaced_pod("p", "ml-team").status.conditions
    assert [(c.type, c.status, c.reason) for c in conditions] == [
        ("PodScheduled", "True", "Unschedulable"),
        ("Ready", "False", None),
    ]
    code, doc = raw(
        kube,
        "PATCH",
        "/api/v1/namespaces/ml-team/pods/p",
        [{"op": "add", "path": "/metadata/annotations", "value": {"k": "v"}}],
        content_type="application/json-patch+json",
    )
    assert code == 200 and doc["metadata"]["annotations"] == {"k": "v"}
    code, doc = raw(
        kube,
        "PATCH",
        "/api/v1/namespaces/ml-team/pods/p",
        [{"op": "remove", "path": "/metadata/nothing"}],
        content_type="application/json-patch+json",
    )
    assert code == 422 and "missing path" in doc["message"]


def test_the_pod_spec_is_immutable_but_for_what_the_api_server_allows(
    core: Any,
) -> None:
    core.create_namespaced_pod("ml-team", pod("p"))
    with pytest.raises(ApiException) as caught:
        core.patch_namespaced_pod("p", "ml-team", {"spec": {"nodeName": "n1"}})
    assert caught.value.status == 422
    assert "pod updates may not change fields" in status(caught.value)["message"]


def test_dry_run_writes_nothing(kube: SimulatedKubernetes, core: Any) -> None:
    created = core.create_namespaced_pod("ml-team", pod("p"), dry_run="All")
    assert created.metadata.name == "p"
    assert core.list_namespaced_pod("ml-team").items == []


def test_finalizers_hold_an_object_until_they_are_removed(kube: SimulatedKubernetes) -> None:
    maps = client_for(client.CoreV1Api, kube)
    maps.create_namespaced_config_map(
        "ml-team", {"metadata": {"name": "c", "finalizers": ["example.com/keep"]}, "data": {}}
    )
    maps.delete_namespaced_config_map("c", "ml-team")
    held = maps.read_namespaced_config_map("c", "ml-team")
    assert held.metadata.deletion_timestamp is not None
    maps.patch_namespaced_config_map("c", "ml-team", {"metadata": {"finalizers": None}})
    with pytest.raises(ApiException) as caught:
        maps.read_namespaced_config_map("c", "ml-team")
    assert caught.value.status == 404


def test_graceful_deletion_of_a_bound_pod_and_at_once_for_an_unbound_one(
    kube: SimulatedKubernetes, core: Any, clock: Clock
) -> None:
    core.create_namespaced_pod("ml-team", pod("bound", nodeName="n1"))
    core.create_namespaced_pod("ml-team", pod("pending"))
    terminating = core.delete_namespaced_pod("bound", "ml-team", grace_period_seconds=45)
    assert terminating.metadata.deletion_grace_period_seconds == 45
    assert terminating.metadata.deletion_timestamp.isoformat() == "2026-01-05T09:00:45+00:00"
    shorter = core.delete_namespaced_pod("bound", "ml-team", grace_period_seconds=5)
    assert shorter.metadata.deletion_grace_period_seconds == 5
    core.delete_namespaced_pod("pending", "ml-team")
    assert [p.metadata.name for p in core.list_namespaced_pod("ml-team").items] == ["bound"]
    core.delete_namespaced_pod("bound", "ml-team", grace_period_seconds=0)  # the kubelet's
    assert core.list_namespaced_pod("ml-team").items == []


def test_delete_collection_by_label(core: Any) -> None:
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        core.create_namespaced_pod("ml-team", pod(name, metadata={"labels": {"team": team}}))
    core.delete_collection_namespaced_pod("ml-team", label_selector="team=x")
    assert [p.metadata.name for p in core.list_namespaced_pod("ml-team").items] == ["c"]


def test_discovery_as_the_client_reads_it(kube: SimulatedKubernetes) -> None:
    assert client_for(client.VersionApi, kube).get_code().git_version.startswith("v1.37")
    groups = {g.name: g for g in client_for(client.ApisApi, kube).get_api_versions().groups}
    assert groups["resource.k8s.io"].preferred_version.version == "v1"
    assert groups["scheduling.k8s.io"].versions[0].group_version in (
        "scheduling.k8s.io/v1",
        "scheduling.k8s.io/v1beta1",
    )
    core_resources = {
        r.name: r for r in client_for(client.CoreV1Api, kube).get_api_resources().resources
    }
    assert core_resources["pods/eviction"].kind == "Eviction"
    assert core_resources["pods"].short_names == ["po"]
    assert raw(kube, "GET", "/readyz") == (200, "ok")
    assert raw(kube, "GET", "/healthz") == (200, "ok")
