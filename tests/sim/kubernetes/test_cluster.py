"""Node objects (and DRA ResourceSlices) from a simulator spec, read back the way gpusched reads
them: through the official client, kube/translate.py and the topology annotation parser."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from kube.translate import node_spec
from scheduling.core.topology_info import parse_topology_info
from sim.cluster import load_topology
from sim.kubernetes.cluster import TOPOLOGY_ANNOTATION, build, topology_annotation
from sim.kubernetes.launch import SimulatedCluster
from sim.spec import load_spec
from tests.sim.kubernetes.helpers import Clock, client_for


@pytest.fixture
def demo(clock: Clock) -> Iterator[SimulatedCluster]:
    found = SimulatedCluster.from_spec(load_spec("demo"), clock=clock).start()
    yield found
    found.close()


def test_the_demo_nodes_as_the_api_serves_them(demo: SimulatedCluster) -> None:
    nodes = {n.metadata.name: n for n in client_for(client.CoreV1Api, demo.kube).list_node().items}
    assert len(nodes) == 16
    h100 = nodes["h100-0000"]
    assert h100.status.allocatable == {
        "cpu": "224",
        "memory": "2097152Mi",
        "pods": "110",
        "ephemeral-storage": "3500Gi",
        "nvidia.com/gpu": "8",
    }
    labels = h100.metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.count"] == "8" and labels["kubernetes.io/hostname"] == "h100-0000"
    assert [c.type for c in h100.status.conditions if c.status == "True"] == ["Ready"]
    mig = nodes["a100-mig-0000"].status.allocatable
    assert (
        mig["nvidia.com/gpu"],
        mig["nvidia.com/mig-3g.40gb"],
        mig["nvidia.com/mig-1g.10gb"],
    ) == (
        "0",
        "8",
        "16",
    )


@pytest.mark.parametrize("topology", ["dgx-h100", "dgx-a100", "pcie-8gpu-2socket", "t4-2gpu"])
def test_the_topology_annotation_reads_back_as_the_servers_topology(topology: str) -> None:
    real = load_topology(topology)
    parsed = parse_topology_info(topology_annotation(real, "node-0"))
    assert parsed.topology == real and parsed.node_name == "node-0"


def test_gpuscheds_translation_reads_the_built_nodes(demo: SimulatedCluster) -> None:
    for node in demo.objects.nodes:
        facts = node_spec(node)
        devices = demo.objects.devices[node["metadata"]["name"]]
        assert facts.topology_source == "annotation" and not facts.warnings
        assert facts.spec.topology is not None and devices.topology is not None
        assert facts.spec.topology.gpu_numa == devices.topology.gpu_numa
        assert len(facts.spec.gpus) == len(devices.gpus)
        assert TOPOLOGY_ANNOTATION in node["metadata"]["annotations"]


def test_with_dra_each_node_publishes_a_resource_slice(clock: Clock) -> None:
    sim = SimulatedCluster.from_spec(load_spec("demo"), clock=clock, dra=True).start()
    try:
        assert (
            "nvidia.com/gpu"
            not in client_for(client.CoreV1Api, sim.kube).read_node("h100-0000").status.allocatable
        )
        resource = client_for(client.ResourceV1Api, sim.kube)
        slices = resource.list_resource_slice().items
        assert len(slices) == 16 and {s.spec.driver for s in slices} == {"gpu.nvidia.com"}
        (h100,) = resource.list_resource_slice(field_selector="spec.nodeName=h100-0000").items
        assert h100.spec.pool.name == "h100-0000" and h100.spec.pool.resource_slice_count == 1
        devices = {d.name: d for d in h100.spec.devices}
        assert sorted(devices) == [f"gpu-{i}" for i in range(8)]
        real = load_topology("dgx-h100")
        for i in range(8):
            attributes = devices[f"gpu-{i}"].attributes
            assert attributes["index"].int == i and attributes["numaNode"].int == real.gpu_numa[i]
            assert attributes["productName"].string == "NVIDIA H100 80GB HBM3"
            assert attributes["resource.kubernetes.io/pcieRoot"].string.startswith("pci0000:")
            assert devices[f"gpu-{i}"].capacity["memory"].value == "81559Mi"
        (mig,) = resource.list_resource_slice(field_selector="spec.nodeName=a100-mig-0000").items
        assert {d.attributes["profile"].string for d in mig.spec.devices} == {
            "3g.40gb",
            "2g.20gb",
            "1g.10gb",
        }
        (gpu_class,) = resource.list_device_class().items
        assert gpu_class.metadata.name == "gpu.nvidia.com"
        assert "device.driver == 'gpu.nvidia.com'" in gpu_class.spec.selectors[0].cel.expression
    finally:
        sim.close()


def test_building_is_deterministic() -> None:
    first, second = build(load_spec("demo")), build(load_spec("demo"))
    assert first.nodes == second.nodes


def test_the_topology_spec_nodes_carry_block_rack_and_clique_labels(clock: Clock) -> None:
    simulated = SimulatedCluster.from_spec(load_spec("topology"), clock=clock).start()
    try:
        core = client_for(client.CoreV1Api, simulated.kube)
        rack = core.list_node(
            label_selector="cloud.provider.com/topology-block=b2,cloud.provider.com/topology-rack=r3"
        ).items
        assert [n.metadata.name for n in rack] == [f"h100-b2-r3-{k:04d}" for k in range(8)]
        assert len({n.metadata.labels["nvidia.com/gpu.clique"] for n in rack}) == 1
        assert rack[0].metadata.labels["kubernetes.io/hostname"] == "h100-b2-r3-0000"
        assert len(core.list_node(label_selector="nvidia.com/gpu.clique").items) == 64
    finally:
        simulated.close()
