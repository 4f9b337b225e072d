import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.topology import TopologyError, parse_nvidia_smi_topo
from tests.builders import TOPOLOGY_DIR, TOPOLOGY_NAMES, topology

# name: (NUMA node of each GPU, PCIe switch of each GPU, link GPU0-GPU1, link GPU0-GPU7)
EXPECTED = {
    "dgx-a100": ((3, 3, 1, 1, 7, 7, 5, 5), (0, 0, 1, 1, 2, 2, 3, 3), "NV12", "NV12"),
    "dgx-h100": ((0, 0, 0, 0, 1, 1, 1, 1), (0, 1, 2, 3, 4, 5, 6, 7), "NV18", "NV18"),
    "pcie-8gpu-2socket": ((0, 0, 0, 0, 1, 1, 1, 1), (0, 0, 1, 1, 2, 2, 3, 3), "PIX", "SYS"),
    "pcie-8gpu-nvbridge": ((0, 0, 0, 0, 1, 1, 1, 1), (0, 1, 2, 3, 4, 5, 6, 7), "NV12", "SYS"),
    "t4-2gpu": ((0, 0), (0, 1), "PHB", None),
}


@pytest.mark.parametrize("name", TOPOLOGY_NAMES)
def test_every_shipped_topology_parses_into_numa_switch_and_links(name: str) -> None:
    numa, switch, link01, link07 = EXPECTED[name]
    topo = topology(name)
    assert topo.gpu_numa == numa
    assert topo.gpu_switch == switch
    assert topo.links[0][1] == link01
    if link07:
        assert topo.links[0][7] == link07
    assert all(topo.links[i][i] == "X" for i in range(topo.gpu_count))
    assert all(
        topo.links[i][j] == topo.links[j][i]
        for i in range(topo.gpu_count)
        for j in range(topo.gpu_count)
    )


def test_pair_scores_follow_nvidias_baseline() -> None:
    assert topology("dgx-h100").pair_scores[0][5] == 1800
    pcie = topology("pcie-8gpu-2socket").pair_scores
    assert (pcie[0][1], pcie[0][2], pcie[0][4]) == (50, 20, 10)
    assert topology("t4-2gpu").pair_scores[0][1] == 30


def test_dgx_a100_cpu_capacity_is_split_over_all_eight_numa_nodes() -> None:
    topo = topology("dgx-a100")
    assert topo.numa_count == 8
    assert topo.numa_cpu_shares(256_000) == (32_000,) * 8


def test_cpu_shares_follow_affinity_sizes_and_add_up() -> None:
    shares = topology("dgx-h100").numa_cpu_shares(224_001)
    assert sum(shares) == 224_001
    assert abs(shares[0] - shares[1]) <= 1


def test_matrix_without_header_is_rejected_with_the_line() -> None:
    with pytest.raises(TopologyError, match="line 1"):
        parse_nvidia_smi_topo("GPU0\t X \n")


def test_unknown_link_label_is_named() -> None:
    text = (TOPOLOGY_DIR / "t4-2gpu.topo").read_text().replace("PHB", "QQQ")
    with pytest.raises(TopologyError, match="'QQQ'"):
        parse_nvidia_smi_topo(text)


HEADER = "\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
GOOD_ROWS = (
    "GPU0\t X \tNV4\tPIX\t0-15\t0\t\tN/A\nGPU1\tNV4\t X \tPIX\t0-15\t0\t\tN/A\nNIC0\tPIX\tPIX\t X\n"
)


def test_a_small_current_output_reads() -> None:
    topo = parse_nvidia_smi_topo(HEADER + GOOD_ROWS)
    assert topo.links[0][1] == "NV4" and topo.gpu_switch == (0, 0) and topo.numa_cpus == (16,)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no header row"),
        ("nvidia-smi: command not found\n", r"line 1: expected the header row"),
        (HEADER, "no row for GPU0, GPU1"),
        (
            HEADER + GOOD_ROWS.replace("GPU1\tNV4\t X \tPIX\t0-15\t0\t\tN/A", "GPU1\tNV4"),
            "line 3: GPU1 has 1 link cells, the header names 3 devices",
        ),
        (
            HEADER + GOOD_ROWS.replace("\t0\t\tN/A\nGPU1", "\t0\t\tN/A\t7\nGPU1"),
            "line 2: GPU0 has 4",
        ),
        (HEADER + GOOD_ROWS + "GPU0\t X \tNV4\tPIX\n", r"line 5: GPU0 appears twice \(line 2"),
        (HEADER + GOOD_ROWS + "GPU9\t X \n", "line 5: 'GPU9' is not a device"),
        (
            HEADER + GOOD_ROWS.replace("\tNV4\t X ", "\tNV4\tNV4", 1),
            "line 3: GPU1: its link to GPU1",
        ),
        (HEADER + GOOD_ROWS.replace("0-15", "15-0", 1), r"line 2: GPU0: CPU Affinity '15-0'"),
        (HEADER + GOOD_ROWS.replace("0-15", "0-999999", 1), "CPUs 0-65535"),
        (HEADER + GOOD_ROWS.replace("0-15", "a-b", 1), "is not a CPU list"),
        (HEADER + GOOD_ROWS.replace("\t0\t", "\t99999999999\t", 1), "NUMA Affinity '99999999999'"),
        (HEADER + GOOD_ROWS.replace("\t0\t", "\t5000\t", 1), "NUMA node 5000 is beyond 1023"),
        ("\tGPU0\tGPU0\n", "line 1: the header names a column twice"),
        ("\tGPU0\tCPU Affinity\tNIC0\n", "line 1: a device column follows"),
        ("\tGPU0\t" + "NIC\t" * 3 + "\n", "names a column twice"),
        ("\tGPU0" + "".join(f"\tNIC{i}" for i in range(1100)) + "\n", "1101 devices, at most 1024"),
        ("\tGPU0\n" + "x" * (5 << 20), "a matrix is at most"),
    ],
)
def test_malformed_outputs_are_refused_naming_the_line(text: str, message: str) -> None:
    with pytest.raises(TopologyError, match=message):
        parse_nvidia_smi_topo(text)


def test_an_empty_cpu_affinity_is_placed_by_its_column() -> None:
    """A GPU row whose CPU Affinity cell is empty: the NUMA cells keep their columns."""
    header = "\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    topo = parse_nvidia_smi_topo(header + "GPU0\t X \t\t\t1\t\tN/A\n")
    assert topo.gpu_numa == (1,) and topo.numa_cpus == (None, None)


def test_the_note_on_nics_left_out_of_the_matrix_is_read_past() -> None:
    note = "76 NICs found in the topology, only displaying 56 in the matrix.\n"
    plain = parse_nvidia_smi_topo(HEADER + GOOD_ROWS)
    assert parse_nvidia_smi_topo(note + HEADER + GOOD_ROWS) == plain


def test_a_numa_node_without_gpus_is_unknown_never_zero_cpus() -> None:
    """DGX A100 in NPS4: GPUs on NUMA nodes 1, 3, 5, 7; the even ones hold none and the output says
    nothing of their CPUs. They are weighted as the known ones when the node's CPU is shared out."""
    topo = topology("dgx-a100")
    assert topo.numa_cpus[0] is None and topo.numa_cpus[1] == 32
    assert 0 not in topo.numa_cpus


_LINE = st.text(alphabet="GPUNICX0123456789 \t-,/AS_NVPIXBHODEY:", max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINE, max_size=12))
def test_any_text_is_read_or_refused_with_a_topology_error(lines: list[str]) -> None:
    with contextlib.suppress(TopologyError):
        parse_nvidia_smi_topo("\n".join(lines))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(TOPOLOGY_NAMES),
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40), _LINE), max_size=4),
)
def test_damaged_real_outputs_are_read_or_refused_with_a_topology_error(
    name: str, edits: list[tuple[int, int, str]]
) -> None:
    """Lines cut, swapped for noise or truncated: a TopologyError naming what is wrong, never
    another exception (the topology agent reports those as GPUTopologyProbeFailed)."""
    lines = (TOPOLOGY_DIR / f"{name}.topo").read_text().splitlines()
    for line, cut, noise in edits:
        if lines:
            k = line % len(lines)
            lines[k] = lines[k][: cut * 5] + noise
    with contextlib.suppress(TopologyError):
        parse_nvidia_smi_topo("\n".join(lines))
