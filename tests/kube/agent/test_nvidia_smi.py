"""nvidia-smi's two outputs into the annotation's facts; anything that does not hold together is
refused, naming the command and the line."""

from __future__ import annotations

import pytest

from kube.agent.nvidia_smi import QUERY_ARGS, ProbeError, combine, parse_query_gpu
from scheduling.core.topology import parse_nvidia_smi_topo
from tests.builders import TOPOLOGY_NAMES
from tests.kube.agent.conftest import query_csv, recorded, without_gpu


def test_the_query_asks_nvidias_documented_fields_as_csv_without_header() -> None:
    assert QUERY_ARGS == (
        "--query-gpu=index,uuid,pci.bus_id,name,memory.total,mig.mode.current",
        "--format=csv,noheader",
    )


@pytest.mark.parametrize("name", TOPOLOGY_NAMES)
def test_recorded_servers_give_their_own_topology_with_gpu_identities(name: str) -> None:
    text = recorded(name)
    topology = parse_nvidia_smi_topo(text)
    info = combine("gpu-node-01", text, query_csv(topology.gpu_count, mig=(1,)))
    assert info.topology == topology and info.link_detail
    assert info.gpu_ids == tuple(range(topology.gpu_count))
    assert info.gpus[1].mig and not info.gpus[0].mig
    assert info.gpus[0].memory_mib == 81559 and info.gpus[0].pci_bus_id == "00000000:18:00.0"


def test_a_gpu_gone_from_the_matrix_is_gone_from_the_facts() -> None:
    text = without_gpu(recorded("dgx-h100"), 7)
    info = combine("n", text, query_csv(7))
    assert info.topology.gpu_count == 7 and info.topology.gpu_numa == (0, 0, 0, 0, 1, 1, 1)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("0, GPU-a, 00000000:18:00.0, H100, 81559 MiB\n", "5 fields, expected 6"),
        ("x, GPU-a, 0:18:00.0, H100, 81559 MiB, Disabled\n", "index 'x'"),
        ("0, [N/A], 0:18:00.0, H100, 81559 MiB, Disabled\n", "uuid '\\[N/A\\]'"),
        ("0, GPU-a, 0:18:00.0, H100, 80 GB, Disabled\n", "memory.total '80 GB'"),
        ("0, GPU-a, 0:18:00.0, H100, 81559 MiB, Maybe\n", "mig.mode.current 'Maybe'"),
        ("1, GPU-a, 0:18:00.0, H100, 81559 MiB, Disabled\n", "not 0..n-1"),
        ("", "listed no GPU"),
    ],
)
def test_a_garbled_query_is_refused(query: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message):
        parse_query_gpu(query)


def test_outputs_that_disagree_are_refused() -> None:
    with pytest.raises(ProbeError, match="shows 8 GPUs, --query-gpu lists 7"):
        combine("n", recorded("dgx-h100"), query_csv(7))
    with pytest.raises(ProbeError, match="nvidia-smi topo -m: "):
        combine("n", recorded("dgx-h100").replace("NV18", "NV?", 3), query_csv(8))
