"""Enforced GPU choice through DRA (resource.k8s.io/v1), the one cycle against the simulated
Kubernetes with the official client: a pod's ResourceClaim gets gpusched's topology-aware GPU set
as its allocation, written (with the pod in reservedFor) before the Binding; the simulated kubelet
prepares exactly those devices and dcgm-exporter labels them with the pod."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from kubernetes import client

from scheduling.models import Allocation
from sim.kubernetes.launch import SimulatedCluster
from sim.kubernetes.resources import named
from sim.spec import parse_spec
from tests.kube.helpers import Clock, gpusched_cycle
from tests.sim.kubernetes.helpers import Clock as SimClock

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NS = "ml-team"
NODE = "h100-0000"
CLASS = "gpu.nvidia.com"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def sim() -> Iterator[SimulatedCluster]:
    spec = parse_spec({"nodePools": [{"name": "h100", "count": 1, "topology": "dgx-h100"}]})
    found = SimulatedCluster.from_spec(
        spec, clock=SimClock(), dra=True, watch_linger_s=0.05, record=True
    ).start()
    found.kube.add_namespace(NS)
    yield found
    found.close()


def resource(sim: SimulatedCluster) -> Any:
    return client.ResourceV1Api(sim.kube.api_client())


def claim(
    name: str, count: int, *, selectors: Sequence[str] = (), match: str = ""
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": CLASS, "count": count}
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    devices: dict[str, Any] = {"requests": [{"name": "gpus", "exactly": exactly}]}
    if match:
        devices["constraints"] = [{"requests": ["gpus"], "matchAttribute": match}]
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"devices": devices}}


def claim_pod(name: str, claim_name: str = "", template: str = "") -> dict[str, Any]:
    entry = {"name": "gpus"}
    entry["resourceClaimTemplateName" if template else "resourceClaimName"] = (
        template or claim_name or name
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {"requests": {"cpu": "4", "memory": "16Gi"}},
                }
            ],
            "resourceClaims": [entry],
        },
        "status": {"phase": "Pending"},
    }


def allocated(sim: SimulatedCluster, name: str) -> list[int]:
    doc = sim.kube.registry.storage.get(_claims(), NS, name)
    assert doc is not None
    results = ((doc.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results")
    return sorted(int(r["device"].removeprefix("gpu-")) for r in results or [])


def _claims() -> Any:
    return named("resource.k8s.io/resourceclaims")


def test_a_four_gpu_claim_gets_one_numa_nodes_gpus_written_before_the_binding(sim) -> None:
    api = resource(sim)
    api.create_namespaced_resource_claim(NS, claim("pair", 2))
    api.create_namespaced_resource_claim(
        NS, claim("four", 4, selectors=[f"device.attributes['{CLASS}'].productName == '{H100}'"])
    )
    sim.kube.add_pod(claim_pod("small", "pair"))
    cycle = gpusched_cycle(sim.kube, list_interval_s=0)
    cycle.run_once()
    pair = allocated(sim, "pair")
    assert len(pair) == 2 and len({g // 4 for g in pair}) == 1  # one NUMA node, one pair
    sim.kube.add_pod(claim_pod("train", "four"))
    cycle.run_once()

    # Best fit: the four GPUs of the NUMA node the pair left whole (DGX H100: NUMA 0 = 0-3).
    four = allocated(sim, "four")
    other_numa = 1 - pair[0] // 4
    assert four == [4 * other_numa + k for k in range(4)]
    doc = sim.kube.registry.storage.get(_claims(), NS, "four")
    pod = sim.kube.pod(NS, "train")
    assert doc["status"]["reservedFor"] == [
        {"resource": "pods", "name": "train", "uid": pod["metadata"]["uid"]}
    ]
    assert "resource.kubernetes.io/delete-protection" in doc["metadata"]["finalizers"]
    assert doc["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"] == [
        {"key": "metadata.name", "operator": "In", "values": [NODE]}
    ]
    # Written before the Binding, as the DynamicResources plugin does in PreBind.
    requests = sim.kube.requests
    status_put = max(
        k for k, (verb, path) in enumerate(requests) if verb == "PUT" and "four/status" in path
    )
    binding = next(
        k for k, (verb, path) in enumerate(requests) if verb == "POST" and "train/binding" in path
    )
    assert status_put < binding
    assert pod["spec"]["nodeName"] == NODE
    assert pod["metadata"]["annotations"]["gpusched.io/gpu-ids"] == ",".join(map(str, four))
    (row,) = Allocation.objects.filter(pod__kube__name="train", active=True)
    assert sorted(row.gpus.values_list("gpu__index", flat=True)) == four

    # The kubelet's DRA driver prepares exactly those devices; DCGM labels them with the pod.
    sim.run_once()
    assert sim.kubelets.assignments()[NODE]["ml-team/train"] == tuple(four)
    labelled = {s.gpu for s in sim.exporter.states() if s.pod == "train"}
    assert labelled == set(four)


def test_a_claim_from_a_template_is_allocated_for_its_pod(sim) -> None:
    template = {
        "metadata": {"name": "one-gpu", "namespace": NS},
        "spec": {"spec": claim("x", 1)["spec"]},
    }
    resource(sim).create_namespaced_resource_claim_template(NS, template)
    sim.kube.add_pod(claim_pod("infer", template="one-gpu"))
    gpusched_cycle(sim.kube, list_interval_s=0).run_once()
    (made,) = sim.kube.pod(NS, "infer")["status"]["resourceClaimStatuses"]
    assert len(allocated(sim, made["resourceClaimName"])) == 1
    assert sim.kube.pod(NS, "infer")["spec"]["nodeName"] == NODE


def _told(sim: SimulatedCluster, name: str) -> list[str]:
    return [e["note"] for e in sim.kube.events if e["regarding"]["name"] == name]


def test_a_claim_that_cannot_be_satisfied_leaves_the_pod_pending_with_the_reason(sim) -> None:
    api = resource(sim)
    # 8 GPUs on one PCIe root: a DGX H100 has two GPUs per root complex.
    api.create_namespaced_resource_claim(
        NS, claim("huge", 6, match="resource.kubernetes.io/numaNode")
    )
    api.create_namespaced_resource_claim(
        NS, claim("picky", 1, selectors=[f"device.attributes['{CLASS}'].index == 3"])
    )
    sim.kube.add_pod(claim_pod("huge"))
    sim.kube.add_pod(claim_pod("picky"))
    sim.kube.add_pod(claim_pod("early", "not-made-yet"))
    cycle = gpusched_cycle(sim.kube, list_interval_s=0)
    cycle.run_once()
    cycle.run_once()
    for name in ("huge", "picky", "early"):
        assert sim.kube.pod(NS, name)["spec"].get("nodeName") is None
    assert allocated(sim, "huge") == [] and allocated(sim, "picky") == []
    (huge,) = _told(sim, "huge")
    assert "NUMA" in huge
    (picky,) = _told(sim, "picky")
    assert "picks among a node's GPUs" in picky
    (early,) = _told(sim, "early")
    assert "WaitingForResourceClaim" in early and "not-made-yet" in early
    condition = next(
        c for c in sim.kube.pod(NS, "early")["status"]["conditions"] if c["type"] == "PodScheduled"
    )
    assert condition["status"] == "False"

    # Once the claim exists, the waiting pod is placed.
    api.create_namespaced_resource_claim(NS, claim("not-made-yet", 2))
    cycle.run_once()
    assert sim.kube.pod(NS, "early")["spec"]["nodeName"] == NODE
    assert len(allocated(sim, "not-made-yet")) == 2


def test_two_pods_never_get_the_same_device(sim) -> None:
    api = resource(sim)
    for k, count in enumerate((3, 2, 1, 2, 4)):
        api.create_namespaced_resource_claim(NS, claim(f"c{k}", count))
        sim.kube.add_pod(claim_pod(f"p{k}", f"c{k}"))
    cycle = gpusched_cycle(sim.kube, list_interval_s=0)
    for _ in range(3):
        cycle.run_once()
    held = [allocated(sim, f"c{k}") for k in range(5)]
    devices = [g for gpus in held for g in gpus]
    assert len(devices) == len(set(devices)) <= 8
    assert sum(map(len, held)) == 8  # 3 + 2 + 1 + 2 fit; the 4-GPU claim waits
    assert held[4] == [] and sim.kube.pod(NS, "p4")["spec"].get("nodeName") is None


def test_a_claim_allocated_by_someone_else_is_respected(sim) -> None:
    api = resource(sim)
    # Another scheduler allocated GPUs 0 and 1 to a claim and bound its pod.
    api.create_namespaced_resource_claim(NS, claim("theirs", 2))
    sim.kube.add_pod(
        {
            **claim_pod("their-pod", "theirs"),
            "spec": {
                **claim_pod("their-pod", "theirs")["spec"],
                "schedulerName": "default-scheduler",
                "nodeName": NODE,
            },
        }
    )
    their_uid = sim.kube.pod(NS, "their-pod")["metadata"]["uid"]
    _allocate(sim, "theirs", [0, 1], their_uid, "their-pod")
    # A claim allocated for our pod before it was scheduled: the pod goes there, on those GPUs.
    api.create_namespaced_resource_claim(NS, claim("ours", 2))
    sim.kube.add_pod(claim_pod("ours"))
    _allocate(sim, "ours", [6, 7], None, "")
    api.create_namespaced_resource_claim(NS, claim("rest", 4))
    sim.kube.add_pod(claim_pod("rest"))
    clock = Clock()
    cycle = gpusched_cycle(sim.kube, clock, list_interval_s=0)
    for _ in range(3):  # "rest" may first take 6 and 7, be refused, and back off
        cycle.run_once()
        clock.advance(60)
    assert allocated(sim, "theirs") == [0, 1]
    assert allocated(sim, "ours") == [6, 7]
    ours = sim.kube.pod(NS, "ours")
    assert ours["spec"]["nodeName"] == NODE
    assert ours["metadata"]["annotations"]["gpusched.io/gpu-ids"] == "6,7"
    (row,) = Allocation.objects.filter(pod__kube__name="ours", active=True)
    assert sorted(row.gpus.values_list("gpu__index", flat=True)) == [6, 7]
    assert allocated(sim, "rest") == [2, 3, 4, 5]  # around both


def _allocate(sim: SimulatedCluster, name: str, gpus: list[int], uid: str | None, pod: str) -> None:
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": CLASS, "pool": NODE, "device": f"gpu-{g}"}
                    for g in gpus
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
        }
    }
    if uid:
        status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": uid}]
    resource(sim).patch_namespaced_resource_claim_status(name, NS, {"status": status})


def test_a_refused_binding_takes_the_claims_allocation_back(sim) -> None:
    resource(sim).create_namespaced_resource_claim(NS, claim("two", 2))
    sim.kube.add_pod(claim_pod("contended", "two"))

    def rival_binds_first(namespace: str, name: str) -> None:
        sim.kube.on_binding = None
        sim.kube.update_pod(namespace, name, lambda p: p["spec"].update(nodeName="elsewhere"))

    sim.kube.on_binding = rival_binds_first
    report = gpusched_cycle(sim.kube, list_interval_s=0).run_once()
    assert report.bound == 0 and report.requeued + report.conflicts >= 1
    doc = sim.kube.registry.storage.get(_claims(), NS, "two")
    assert not (doc.get("status") or {}).get("allocation")  # taken back: nobody holds gpu-*
    assert not (doc.get("status") or {}).get("reservedFor")
