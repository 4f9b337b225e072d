"""The kinds gpusched reads and writes, through their typed APIs or CustomObjectsApi: pod groups
of the three gang schedulers, DRA objects and claim status rules, Kueue objects,
NodeResourceTopology versions, events and leases."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import client_for, pod, status


def test_the_kubernetes_pod_group_api(kube: SimulatedKubernetes, core: Any) -> None:
    groups = client_for(client.SchedulingV1beta1Api, kube)
    body = {"metadata": {"name": "train"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}}}
    groups.create_namespaced_pod_group("ml-team", body)
    found = groups.read_namespaced_pod_group("train", "ml-team")
    assert found.spec.scheduling_policy.gang.min_count == 4
    custom = client_for(client.CustomObjectsApi, kube)  # 1.36's version serves the same object
    alpha = custom.get_namespaced_custom_object(
        "scheduling.k8s.io", "v1alpha2", "ml-team", "podgroups", "train"
    )
    assert alpha["apiVersion"] == "scheduling.k8s.io/v1alpha2"
    assert alpha["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    member = pod("train-0", schedulingGroup={"podGroupName": "train"})
    assert (
        core.create_namespaced_pod("ml-team", member).spec.scheduling_group.pod_group_name
        == "train"
    )
    for policy, message in (
        ({"gang": {"minCount": 0}}, "must be greater than zero"),
        ({"gang": {"minCount": 2}, "basic": {}}, "exactly one of `basic`, `gang` is required"),
    ):
        with pytest.raises(ApiException) as caught:
            groups.create_namespaced_pod_group(
                "ml-team", {"metadata": {"name": "bad"}, "spec": {"schedulingPolicy": policy}}
            )
        assert caught.value.status == 422 and message in status(caught.value)["message"]


@pytest.mark.parametrize(
    ("group", "version", "spec"),
    [
        ("scheduling.x-k8s.io", "v1alpha1", {"minMember": 4, "scheduleTimeoutSeconds": 60}),
        (
            "scheduling.volcano.sh",
            "v1beta1",
            {"minMember": 4, "queue": "default", "priorityClassName": "online"},
        ),
    ],
)
def test_gang_schedulers_pod_groups_as_custom_objects(
    kube: SimulatedKubernetes, group: str, version: str, spec: dict[str, Any]
) -> None:
    custom = client_for(client.CustomObjectsApi, kube)
    body = {
        "apiVersion": f"{group}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": "g"},
        "spec": spec,
    }
    custom.create_namespaced_custom_object(group, version, "ml-team", "podgroups", body)
    listed = custom.list_namespaced_custom_object(group, version, "ml-team", "podgroups")
    assert [(i["metadata"]["name"], i["spec"]) for i in listed["items"]] == [("g", spec)]
    patched = custom.patch_namespaced_custom_object(
        group, version, "ml-team", "podgroups", "g", {"spec": {"minMember": 2}}
    )
    assert patched["spec"]["minMember"] == 2 and patched["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(
            group, version, "ml-team", "podgroups", "g", {"spec": {"minMember": "four"}}
        )
    assert caught.value.status == 422


def test_kueue_objects_are_stored_and_served(kube: SimulatedKubernetes) -> None:
    custom = client_for(client.CustomObjectsApi, kube)
    group, version = "kueue.x-k8s.io", "v1beta2"
    flavor = {
        "apiVersion": f"{group}/{version}",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100"},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
    }
    custom.create_cluster_custom_object(group, version, "resourceflavors", flavor)
    queue = {
        "apiVersion": f"{group}/{version}",
        "kind": "LocalQueue",
        "metadata": {"name": "lq"},
        "spec": {"clusterQueue": "cq"},
    }
    custom.create_namespaced_custom_object(group, version, "ml-team", "localqueues", queue)
    for plural in ("clusterqueues", "cohorts", "workloadpriorityclasses"):
        kind = {"clusterqueues": "ClusterQueue", "cohorts": "Cohort"}.get(
            plural, "WorkloadPriorityClass"
        )
        doc = {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": {"name": "x"}}
        custom.create_cluster_custom_object(group, version, plural, doc)
    got = custom.get_cluster_custom_object(group, version, "resourceflavors", "h100")
    assert got["spec"] == flavor["spec"]
    assert custom.list_namespaced_custom_object(group, version, "ml-team", "localqueues")["items"][
        0
    ]["spec"] == {"clusterQueue": "cq"}


def test_node_resource_topology_in_the_versions_served(kube: SimulatedKubernetes) -> None:
    custom = client_for(client.CustomObjectsApi, kube)
    kube.set_nrt(
        {
            "apiVersion": "topology.node.k8s.io/v1alpha2",
            "kind": "NodeResourceTopology",
            "metadata": {"name": "n1"},
            "zones": [],
        }
    )
    for version in ("v1alpha2", "v1alpha1"):
        items = custom.list_cluster_custom_object(
            "topology.node.k8s.io", version, "noderesourcetopologies"
        )
        assert items["items"][0]["apiVersion"] == f"topology.node.k8s.io/{version}"
    kube.nrt_versions = ("v1alpha1",)
    with pytest.raises(ApiException) as caught:
        custom.list_cluster_custom_object(
            "topology.node.k8s.io", "v1alpha2", "noderesourcetopologies"
        )
    assert caught.value.status == 404


H100_ONLY = "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA H100')"
CLAIM: dict[str, Any] = {
    "metadata": {"name": "four-gpus"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 4,
                        "selectors": [{"cel": {"expression": H100_ONLY}}],
                    },
                }  # noqa: E501
            ],
            "constraints": [
                {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
            ],
        }
    },
}


def allocation(devices: list[str]) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {"request": "gpus", "driver": "gpu.nvidia.com", "pool": "n1", "device": d}
                for d in devices
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
            ]
        },
    }


def test_resource_claims_and_their_status_rules(kube: SimulatedKubernetes, core: Any) -> None:
    resource = client_for(client.ResourceV1Api, kube)
    resource.create_device_class(
        {
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }
    )
    created = resource.create_namespaced_resource_claim("ml-team", CLAIM)
    assert created.spec.devices.requests[0].exactly.allocation_mode == "ExactCount"
    user = core.create_namespaced_pod(
        "ml-team", pod("user", resourceClaims=[{"name": "gpus", "resourceClaimName": "four-gpus"}])
    )
    consumer = {"resource": "pods", "name": "user", "uid": user.metadata.uid}

    with pytest.raises(ApiException) as caught:  # reserved while not allocated
        resource.patch_namespaced_resource_claim_status(
            "four-gpus", "ml-team", {"status": {"reservedFor": [consumer]}}
        )
    assert caught.value.status == 422
    assert "may not be specified when `allocated` is not set" in status(caught.value)["message"]

    devices = ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    claimed = resource.patch_namespaced_resource_claim_status(
        "four-gpus",
        "ml-team",
        {"status": {"allocation": allocation(devices), "reservedFor": [consumer]}},
    )
    results = claimed.status.allocation.devices.results
    assert [(r.request, r.driver, r.pool, r.device) for r in results] == [
        ("gpus", "gpu.nvidia.com", "n1", d) for d in devices
    ]
    assert claimed.status.reserved_for[0].uid == user.metadata.uid
    with pytest.raises(ApiException) as caught:  # an allocation is immutable
        resource.patch_namespaced_resource_claim_status(
            "four-gpus", "ml-team", {"status": {"allocation": allocation(["gpu-4"])}}
        )
    assert caught.value.status == 422
    with pytest.raises(ApiException) as caught:
        resource.patch_namespaced_resource_claim(
            "four-gpus", "ml-team", {"spec": {"devices": {"requests": []}}}
        )
    assert caught.value.status == 422  # the spec is immutable

    core.delete_namespaced_pod("user", "ml-team")  # not bound: gone at once
    released = resource.read_namespaced_resource_claim("four-gpus", "ml-team")
    assert released.status.reserved_for is None and released.status.allocation is None


def test_a_claim_template_gives_each_pod_its_own_claim(
    kube: SimulatedKubernetes, core: Any
) -> None:
    resource = client_for(client.ResourceV1Api, kube)
    resource.create_namespaced_resource_claim_template(
        "ml-team", {"metadata": {"name": "one-gpu"}, "spec": {"spec": CLAIM["spec"]}}
    )
    core.create_namespaced_pod(
        "ml-team",
        pod("p", resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]),
    )
    created = core.read_namespaced_pod("p", "ml-team")
    (entry,) = created.status.resource_claim_statuses
    assert entry.name == "gpu" and entry.resource_claim_name.startswith("p-gpu-")
    claim = resource.read_namespaced_resource_claim(entry.resource_claim_name, "ml-team")
    assert claim.metadata.owner_references[0].uid == created.metadata.uid
    core.delete_namespaced_pod("p", "ml-team")
    assert resource.list_namespaced_resource_claim("ml-team").items == []  # collected with its pod


def test_invalid_claims_are_refused(kube: SimulatedKubernetes) -> None:
    resource = client_for(client.ResourceV1Api, kube)
    bad = {
        "metadata": {"name": "bad"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 0}}
                ],
                "constraints": [{"requests": ["nothing"], "matchAttribute": "pcieRoot"}],
            }
        },
    }
    with pytest.raises(ApiException) as caught:
        resource.create_namespaced_resource_claim("ml-team", bad)
    fields = {c["field"] for c in status(caught.value)["details"]["causes"]}
    assert fields == {
        "spec.devices.requests[0].exactly.count",
        "spec.devices.constraints[0].requests[0]",
        "spec.devices.constraints[0].matchAttribute",
    }


def test_events_keep_the_api_servers_validation(kube: SimulatedKubernetes) -> None:
    events = client_for(client.EventsV1Api, kube)
    body = {
        "metadata": {"generateName": "p."},
        "eventTime": "2026-01-05T09:00:00Z",
        "reportingController": "gpusched.io/scheduler",
        "reportingInstance": "r",
        "action": "Binding",
        "reason": "Scheduled",
        "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "ml-team"},
    }
    with pytest.raises(ApiException) as caught:
        events.create_namespaced_event("ml-team", body, _preload_content=False)
    assert caught.value.status == 422 and "eventTime" in status(caught.value)["message"]
    body["eventTime"] = "2026-01-05T09:00:00.123456Z"
    response = events.create_namespaced_event("ml-team", body, _preload_content=False)
    assert response.status == 201 and json.loads(response.data)["reason"] == "Scheduled"
    assert (
        events.list_namespaced_event("ml-team", field_selector="reason=Scheduled").items[0].note
        is None
    )


def test_lease_times_must_be_micro_times(kube: SimulatedKubernetes) -> None:
    leases = client_for(client.CoordinationV1Api, kube)
    body = {
        "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a", "renewTime": "2026-01-05T09:00:00Z"},
    }
    with pytest.raises(ApiException) as caught:
        leases.create_namespaced_lease("ml-team", body, _preload_content=False)
    assert (
        caught.value.status == 400
        and "cannot be handled as a Lease" in status(caught.value)["message"]
    )
