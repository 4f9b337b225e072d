"""The seeds' annotation `gpu-topology.nvidia.com/info` (GPUTopologyInfo) and gpusched's
extensions: read as written, written so that reading gives the same facts back."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.topology import TopologyError
from scheduling.core.topology_info import GpuIdentity, TopologyInfo, parse_topology_info
from tests.builders import TOPOLOGY_NAMES, topology

# The seeds' JSON as Go's encoding/json writes GPUTopologyInfo: map[int]int with string keys.
SEEDS_ANNOTATION = (
    '{"nodeName":"gpu-node-01","gpuIds":[0,1,2,3,4,5,6,7],'
    '"numaNode":{"0":0,"1":0,"2":0,"3":0,"4":1,"5":1,"6":1,"7":1},'
    '"pcieSwitch":{"0":0,"1":0,"2":1,"3":1,"4":2,"5":2,"6":3,"7":3},"totalGpus":8}'
)


def test_the_seeds_annotation_is_read_as_written() -> None:
    info = parse_topology_info(SEEDS_ANNOTATION)
    assert info.node_name == "gpu-node-01" and info.gpu_ids == tuple(range(8))
    assert info.topology.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert info.topology.gpu_switch == (0, 0, 1, 1, 2, 2, 3, 3)
    # No link detail in the seeds' keys: same switch PIX, same NUMA node NODE, else SYS.
    links = info.topology.links
    assert (links[0][1], links[0][2], links[0][4]) == ("PIX", "NODE", "SYS")
    assert not info.link_detail and not info.ignored_keys


def test_integer_keys_and_no_numa_affinity_are_read_too() -> None:
    doc = {
        "gpuIds": [0, 1],
        "numaNode": {0: -1, 1: -1},  # sysfs numa_node of a machine without NUMA
        "pcieSwitch": {0: 4, 1: 7},
        "totalGpus": 2,
    }
    info = parse_topology_info(doc)
    assert info.topology.gpu_numa == (0, 0) and info.topology.gpu_switch == (0, 1)
    assert info.node_name == ""


def test_gpu_ids_need_not_start_at_zero_and_keep_their_order() -> None:
    doc = {"gpuIds": [0, 1, 3], "numaNode": {"0": 0, "1": 0, "3": 1}, "pcieSwitch": {}}
    doc["pcieSwitch"] = {"0": 0, "1": 0, "3": 1}
    info = parse_topology_info(json.dumps(doc))  # GPU 2 is gone; totalGpus left out
    assert info.gpu_ids == (0, 1, 3) and info.topology.gpu_numa == (0, 0, 1)


def test_unknown_keys_are_reported_not_refused() -> None:
    doc = json.loads(SEEDS_ANNOTATION)
    doc["driverVersion"] = "550.90.07"
    info = parse_topology_info(json.dumps(doc))
    assert info.ignored_keys == ("driverVersion",)
    assert info.topology == parse_topology_info(SEEDS_ANNOTATION).topology


def test_the_extensions_carry_measured_links_cpus_and_gpu_identities() -> None:
    measured = topology("pcie-8gpu-nvbridge")
    doc = json.loads(SEEDS_ANNOTATION)
    doc["links"] = {
        str(i): {str(j): measured.links[i][j] for j in range(8) if j != i} for i in range(8)
    }
    doc["numaCpus"] = {"0": 64, "1": 64}
    doc["gpus"] = {"3": {"uuid": "GPU-3", "pciBusId": "00000000:3B:00.0", "mig": True}}
    info = parse_topology_info(json.dumps(doc))
    assert info.link_detail and info.topology.links == measured.links
    assert info.topology.is_nvlink(0, 1) and not info.topology.is_nvlink(0, 2)
    assert info.topology.numa_cpus == (64, 64)
    assert info.gpus[3] == GpuIdentity(uuid="GPU-3", pci_bus_id="00000000:3B:00.0", mig=True)
    assert info.gpus[0] == GpuIdentity()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"gpuIds": "0"}, "gpuIds must be a list"),
        ({"gpuIds": [0, 0]}, "twice"),
        ({"gpuIds": [0, -1]}, r"gpuIds\[1\]"),
        ({"totalGpus": 9}, "totalGpus is 9"),
        ({"nodeName": 7}, "nodeName"),
        ({"numaNode": {"0": 0}}, "numaNode has no entry for GPU 1"),
        ({"numaNode": None}, "numaNode must map"),
        ({"pcieSwitch": {str(i): "a" for i in range(8)}}, r"pcieSwitch\[0\]"),
        ({"numaNode": {**{str(i): 0 for i in range(8)}, "9": 0}}, "GPU 9 is not in gpuIds"),
        ({"numaNode": {**{str(i): 0 for i in range(8)}, "x": 0}}, "'x' is not a GPU id"),
        ({"links": {"0": {"1": "QQQ"}}}, r"links\[0\]\[1\]"),
        ({"links": {"0": {}}}, "links"),
        ({"numaCpus": {"0": -4}}, r"numaCpus\[0\]"),
        ({"gpus": {"0": {"uuid": 5}}}, r"gpus\[0\].uuid"),
        ({"gpus": {"0": {"memoryMiB": True}}}, r"gpus\[0\].memoryMiB"),
    ],
)
def test_bad_annotations_are_refused_naming_the_key(
    change: dict[str, object], message: str
) -> None:
    doc = {**json.loads(SEEDS_ANNOTATION), **change}
    with pytest.raises(TopologyError, match=message):
        parse_topology_info(json.dumps(doc))


@pytest.mark.parametrize("value", ["{", "[]", '"text"'])
def test_text_that_is_no_json_object_is_refused(value: str) -> None:
    with pytest.raises(TopologyError, match="JSON"):
        parse_topology_info(value)


@st.composite
def infos(draw: st.DrawFn) -> TopologyInfo:
    measured = topology(draw(st.sampled_from(TOPOLOGY_NAMES)))
    n = measured.gpu_count
    ids = tuple(sorted(draw(st.sets(st.integers(0, 31), min_size=n, max_size=n))))
    gpus = tuple(
        GpuIdentity(uuid=f"GPU-{i}", pci_bus_id=f"00000000:{i:02X}:00.0", memory_mib=81559)
        for i in ids
    )
    return TopologyInfo(
        node_name=draw(st.sampled_from(("", "gpu-node-01"))),
        gpu_ids=ids,
        topology=measured,
        gpus=gpus if draw(st.booleans()) else (),
        link_detail=True,
    )


@settings(max_examples=60, deadline=None)
@given(info=infos())
def test_writing_then_reading_gives_the_same_facts(info: TopologyInfo) -> None:
    assert parse_topology_info(info.to_json()).same_facts(info)
