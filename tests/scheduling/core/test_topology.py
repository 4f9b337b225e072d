import pytest

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
