"""DRA (resource.k8s.io/v1), the pure part: ResourceSlices and DeviceClasses into per-node device
tables on gpusched's GPU indices, ResourceClaims into what the core is asked, and the claim status
kube-scheduler's DynamicResources plugin would write for a placement."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kube.dra import (
    FINALIZER,
    DraError,
    allocated_keys,
    allocation_status,
    claim_ask,
    device_class,
    devices_by_node,
    map_devices,
    reserved_for,
    topology_of,
)
from kube.dra_selectors import SelectorError, parse_selector
from kube.translate import node_spec, to_request
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.topology_info import GpuIdentity
from scheduling.core.types import GpuDevice, Resources, TopologyPolicy, TopologyScope
from scheduling.pod_template import PodTemplate
from tests.kube import objects
from tests.kube.helpers import framework

Obj = dict[str, Any]
H100 = "NVIDIA H100 80GB HBM3"


def gpu(i: int, *, product: str = H100, index: bool = True) -> Obj:
    """A device as NVIDIA's DRA driver publishes it (cmd/gpu-kubelet-plugin/deviceinfo.go)."""
    attributes: Obj = {
        "type": {"string": "gpu"},
        "uuid": {"string": f"GPU-{i}"},
        "minor": {"int": i},
        "productName": {"string": product},
        "architecture": {"string": "Hopper"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "pcieBusID": {"string": f"0000:{0x18 + 0x10 * i:02x}:00.0"},
        "resource.kubernetes.io/pcieRoot": {"string": f"pci0000:{i // 2:02x}"},
        "resource.kubernetes.io/numaNode": {"int": i // 4},
    }
    if index:
        attributes["index"] = {"int": i}
    return {"name": f"gpu-{i}", "attributes": attributes, "capacity": {"memory": {"value": "80Gi"}}}


def resource_slice(node: str, devices: list[Obj], *, generation: int = 1, count: int = 1) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com-{generation}"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            "devices": devices,
        },
    }


GPU_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


def claim(requests: list[Obj], constraints: list[Obj] | None = None) -> Obj:
    devices: Obj = {"requests": requests}
    if constraints is not None:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "train-gpus", "namespace": "ml-team", "uid": "claim-uid"},
        "spec": {"devices": devices},
        "status": {},
    }


def gpus_request(name: str = "gpus", count: int = 4, *selectors: str) -> Obj:
    exactly: Obj = {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount"}
    exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    return {"name": name, "exactly": exactly}


CLASSES = {"gpu.nvidia.com": device_class(GPU_CLASS)}


def dgx_devices(**kwargs: Any) -> Any:
    return devices_by_node([resource_slice("gpu-a", [gpu(i, **kwargs) for i in range(8)])])


# --- slices and device tables --------------------------------------------------------------------


def test_slices_give_node_local_devices_of_the_newest_complete_generation() -> None:
    view = devices_by_node(
        [
            resource_slice("gpu-a", [gpu(i) for i in range(8)], generation=1),
            resource_slice("gpu-a", [gpu(i) for i in range(7)], generation=2),  # a GPU gone
            resource_slice("gpu-b", [gpu(0)], count=2),  # half published
            {
                "metadata": {"name": "net"},
                "spec": {"driver": "x", "pool": {"name": "p"}, "allNodes": True},
            },
        ]
    )
    assert [d.name for d in view.devices["gpu-a"]] == [f"gpu-{i}" for i in range(7)]
    assert "gpu-b" not in view.devices
    assert any("1 of 2 ResourceSlices" in w for w in view.warnings)
    assert any("ResourceSlice net: devices not local" in w for w in view.warnings)
    device = view.devices["gpu-a"][3]
    assert device.attributes["gpu.nvidia.com/productName"] == H100  # short names qualified
    assert device.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:01"
    assert device.numa == 0 and device.capacity["gpu.nvidia.com/memory"] == 80 * 2**30
    assert device.key == ("gpu.nvidia.com", "gpu-a", "gpu-3")


@pytest.mark.parametrize("value", ["lots", None, "1e999999", "Infinity", "80Gi" * 20])
def test_a_capacity_that_is_no_quantity_is_refused_naming_the_device(value: object) -> None:
    """By the one quantity parser (scheduling/core/quantity.py): "1e999999" and "Infinity" were
    read before (as 10^999999 and as infinity); a slice with either is refused now."""
    device = gpu(0)
    device["capacity"] = {"memory": {"value": value}}
    with pytest.raises(DraError, match="device gpu.nvidia.com/.*: capacity.memory.value is not a"):
        devices_by_node([resource_slice("gpu-a", [device])])


def test_devices_map_to_gpu_indices_by_uuid_bus_index_minor_or_name() -> None:
    devices = dgx_devices().devices["gpu-a"]
    shuffled = list(reversed(devices))
    named = [GpuDevice(i, H100, uuid=f"GPU-{i}") for i in range(8)]
    by_uuid = map_devices(shuffled, named)
    assert by_uuid.matched_by == "uuid" and by_uuid.by_index[5].name == "gpu-5"
    anonymous = [GpuDevice(i, H100) for i in range(8)]
    # nvidia-smi prints an 8-digit PCI domain, the driver 4 digits: the same address.
    identities = [GpuIdentity(pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0") for i in range(8)]
    by_bus = map_devices(shuffled, anonymous, identities)
    assert by_bus.matched_by == "pciBusID" and by_bus.by_index[2].name == "gpu-2"
    assert map_devices(shuffled, anonymous).matched_by == "index"
    newer = dgx_devices(index=False).devices["gpu-a"]  # newer drivers publish `minor` only
    assert map_devices(newer, anonymous).matched_by == "minor"
    assert map_devices(newer, anonymous).index_of(("gpu.nvidia.com", "gpu-a", "gpu-6")) == 6


def test_standard_attributes_give_a_topology() -> None:
    devices = dgx_devices().devices["gpu-a"]
    topology = topology_of(map_devices(devices, [objects_gpu(i) for i in range(8)]))
    assert topology is not None
    assert topology.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert topology.gpu_switch == (0, 0, 1, 1, 2, 2, 3, 3)
    assert (topology.links[0][1], topology.links[0][2], topology.links[0][4]) == (
        "PXB",
        "NODE",
        "SYS",
    )


def objects_gpu(i: int) -> GpuDevice:
    return GpuDevice(i, H100)


# --- CEL ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "matches"),
    [
        ('device.driver == "gpu.nvidia.com"', True),
        ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'", True),
        ("device.attributes['gpu.nvidia.com'].productName != 'NVIDIA H100 80GB HBM3'", False),
        ("device.attributes['gpu.nvidia.com'].index < 4", True),
        ("device.attributes['gpu.nvidia.com'].index >= 4", False),
        ('device.attributes["resource.kubernetes.io"].numaNode == 0', True),
        ("device.attributes['gpu.nvidia.com'].missing == 1", False),
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80Gi'))", False),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('96Gi'))", True),
        (
            "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].index == 3",
            True,
        ),
    ],
)
def test_supported_cel_forms(expression: str, matches: bool) -> None:
    device = dgx_devices().devices["gpu-a"][3]
    assert all(s.matches(device) for s in parse_selector(expression)) is matches


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("device.driver == 'a' || device.driver == 'b'", "not \\|\\| or !"),
        ("!(device.driver == 'a')", "not \\|\\| or !"),
        ("device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA')", "not a supported"),
        ("'x' in device.attributes['gpu.nvidia.com']", "not a supported"),
        ("device.capacity['gpu.nvidia.com'].memory >= 40", "compareTo"),
        (
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('lots')) > 0",
            "not a quantity",
        ),
        # Read by the one quantity parser (scheduling/core/quantity.py): beyond any cluster, or
        # no Kubernetes quantity at all (both were read before, as 10^999 and as infinity).
        (
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('1e999')) > 0",
            "not a quantity",
        ),
        (
            "device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('Infinity'))",
            "not a quantity",
        ),
    ],
)
def test_other_cel_is_refused_with_a_reason(expression: str, message: str) -> None:
    with pytest.raises(SelectorError, match=message):
        parse_selector(expression)


# --- claims ------------------------------------------------------------------------------------


def test_a_claim_for_four_gpus_on_one_pcie_root_asks_the_core_for_that() -> None:
    doc = claim(
        [
            gpus_request(
                "gpus", 4, "device.attributes['gpu.nvidia.com'].productName == '" + H100 + "'"
            )
        ],
        [{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/numaNode"}],
    )
    ask = claim_ask(doc, CLASSES)
    table = map_devices(dgx_devices().devices["gpu-a"], [objects_gpu(i) for i in range(8)])
    assert ask.gpus(table) == 4 and ask.models == {H100}
    assert ask.scope is TopologyScope.NUMA and ask.policy is TopologyPolicy.RESTRICTED
    assert ask.eligible(table) == 0xFF
    # allocationMode All: every matching device of the node.
    everything = {
        "name": "all",
        "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"},
    }
    assert claim_ask(claim([everything]), CLASSES).gpus(table) == 8
    pcie = claim([gpus_request()], [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    assert claim_ask(pcie, CLASSES).scope is TopologyScope.PCIE


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"requests": []}, "at least one request"),
        ({"requests": [{"name": "g", "firstAvailable": []}]}, "firstAvailable is not supported"),
        ({"requests": [{"name": "g"}]}, "exactly is required"),
        (
            {
                "requests": [
                    {
                        "name": "g",
                        "exactly": {"deviceClassName": "gpu.nvidia.com", "adminAccess": True},
                    }
                ]
            },
            "exactly.adminAccess is not supported",
        ),
        (
            {"requests": [{"name": "g", "exactly": {"deviceClassName": "tpu"}}]},
            "no DeviceClass 'tpu'",
        ),
        ({"requests": [gpus_request(count=0)]}, "count must be a positive integer"),
        (
            {
                "requests": [gpus_request()],
                "constraints": [{"matchAttribute": "gpu.nvidia.com/uuid"}],
            },
            "matchAttribute 'gpu.nvidia.com/uuid'",
        ),
        (
            {"requests": [gpus_request()], "constraints": [{"distinctAttribute": "x"}]},
            "distinctAttribute is not supported",
        ),
        (
            {"requests": [gpus_request("g", 1, "device.driver == 'a' || true")]},
            r"requests\[0\].exactly.selectors\[0\]: CEL",
        ),
    ],
)
def test_claims_gpusched_cannot_honour_are_refused_naming_the_field(
    change: Obj, message: str
) -> None:
    doc = claim([])
    doc["spec"]["devices"] = change
    with pytest.raises(DraError, match=message):
        claim_ask(doc, CLASSES)


# --- allocation --------------------------------------------------------------------------------


def test_the_claim_status_for_a_placement_is_the_dynamic_resources_plugins() -> None:
    node = objects.node("gpu-a")  # the seeds' annotation: NUMA 0 = GPUs 0-3
    spec = node_spec(node).spec
    table = map_devices(dgx_devices().devices["gpu-a"], spec.gpus)
    doc = claim([gpus_request()], [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}])
    doc["spec"]["devices"]["constraints"] = [{"matchAttribute": "resource.kubernetes.io/numaNode"}]
    ask = claim_ask(doc, CLASSES)
    template = PodTemplate(
        resources=Resources(cpu_milli=1000, gpus=ask.gpus(table)),
        gpu_models=(),
        topology_policy=ask.policy,
        topology_scope=ask.scope,
    )
    snapshot = ClusterSnapshot([spec])
    decision = framework().schedule_one(to_request("p-uid", "p", "ml-team", 0, template), snapshot)
    assert decision.placement is not None
    chosen = decision.placement.gpu_indices
    assert spec.topology is not None and len({spec.topology.gpu_numa[g] for g in chosen}) == 1

    doc["status"] = {"reservedFor": [reserved_for("p", "p-uid")], "devices": []}
    status = allocation_status(doc, ask, "gpu-a", chosen, table, pod_name="p", pod_uid="p-uid")
    assert status == {
        "devices": [],  # the driver's own part of the status is left as it was
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpus",
                        "driver": "gpu.nvidia.com",
                        "pool": "gpu-a",
                        "device": f"gpu-{g}",
                    }
                    for g in sorted(chosen)
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["gpu-a"]}
                        ]
                    }
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "p-uid"}],  # once
    }
    json.dumps(status)  # plain JSON, ready for UpdateStatus
    assert FINALIZER == "resource.kubernetes.io/delete-protection"
    # Another claim never gets these devices: they are held.
    held = allocated_keys([{"status": status}])
    assert table.mask_of(held) == sum(1 << g for g in chosen)


def test_gpus_that_do_not_satisfy_the_requests_are_refused() -> None:
    table = map_devices(dgx_devices().devices["gpu-a"], [objects_gpu(i) for i in range(8)])
    low = gpus_request("low", 1, "device.attributes['gpu.nvidia.com'].index < 2")
    high = gpus_request("high", 1, "device.attributes['gpu.nvidia.com'].index >= 6")
    ask = claim_ask(claim([low, high]), CLASSES)
    assert ask.eligible(table) == 0b11000011
    status = allocation_status(
        claim([low, high]), ask, "gpu-a", (7, 1), table, pod_name="p", pod_uid="u"
    )
    results = status["allocation"]["devices"]["results"]
    assert [(r["request"], r["device"]) for r in results] == [("low", "gpu-1"), ("high", "gpu-7")]
    with pytest.raises(DraError, match="request high needs 1 matching devices"):
        allocation_status(
            claim([low, high]), ask, "gpu-a", (0, 1), table, pod_name="p", pod_uid="u"
        )
    with pytest.raises(DraError, match="GPU 9 has no DRA device"):
        allocation_status(claim([low]), ask, "gpu-a", (9,), table, pod_name="p", pod_uid="u")
