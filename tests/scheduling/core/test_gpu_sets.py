import pytest

from scheduling.core.gpu_sets import (
    RANK_NODE,
    RANK_NUMA,
    RANK_NVLINK,
    RANK_PCIE,
    GpuSetChooser,
    Requirement,
)
from scheduling.core.types import TopologyScope
from tests.builders import topology

ALL = 0xFF


def mask(*gpus: int) -> int:
    return sum(1 << g for g in gpus)


def test_one_gpu_pod_takes_a_gpu_whose_nvlink_partner_is_busy() -> None:
    chooser = GpuSetChooser(topology("pcie-8gpu-nvbridge"))
    # GPU1's bridged partner GPU0 is busy: taking GPU1 keeps the pairs (2,3), (4,5), (6,7) whole.
    assert chooser.choose(ALL & ~mask(0), 1) == (1,)


def test_two_gpu_pod_takes_the_pix_pair_of_the_partly_used_numa_node() -> None:
    chooser = GpuSetChooser(topology("pcie-8gpu-2socket"))
    free = mask(2, 3, 4, 5, 6, 7)  # GPUs 0 and 1 of NUMA 0 are busy
    assert chooser.choose(free, 2) == (2, 3)
    assert chooser.rank((2, 3)) == RANK_PCIE


def test_four_gpu_pod_keeps_the_whole_free_numa_node_when_another_fits() -> None:
    chooser = GpuSetChooser(topology("dgx-h100"))
    # NUMA 0 has 0..3 free plus NUMA 1 fully free: the pod should not split the free NUMA 1 block.
    assert chooser.choose(ALL, 4) in {(0, 1, 2, 3), (4, 5, 6, 7)}
    assert chooser.choose(mask(0, 1, 2, 3, 4, 5, 6, 7) & ~mask(7), 4) == (0, 1, 2, 3)


def test_nvlink_set_ranks_above_pcie_numa_and_node() -> None:
    assert GpuSetChooser(topology("dgx-h100")).rank((0, 5)) == RANK_NVLINK
    pcie = GpuSetChooser(topology("pcie-8gpu-2socket"))
    assert (pcie.rank((0, 1)), pcie.rank((0, 2)), pcie.rank((0, 4))) == (
        RANK_PCIE,
        RANK_NUMA,
        RANK_NODE,
    )


@pytest.mark.parametrize(
    ("name", "k", "requirement", "possible"),
    [
        (
            "dgx-a100",
            4,
            Requirement(TopologyScope.NUMA, same_numa=True),
            False,
        ),  # NPS4: 2 GPUs per NUMA node
        ("dgx-a100", 4, Requirement(TopologyScope.NVLINK), True),
        ("dgx-a100", 2, Requirement(TopologyScope.NUMA, same_numa=True), True),
        ("dgx-h100", 8, Requirement(TopologyScope.NUMA), False),
        ("dgx-h100", 8, Requirement(TopologyScope.NVLINK), True),
        (
            "dgx-h100",
            2,
            Requirement(TopologyScope.PCIE),
            True,
        ),  # NVLink inside a NUMA node counts as close
        ("pcie-8gpu-2socket", 2, Requirement(TopologyScope.NVLINK), False),
        ("pcie-8gpu-2socket", 4, Requirement(TopologyScope.PCIE), False),
        ("pcie-8gpu-nvbridge", 2, Requirement(TopologyScope.NVLINK), True),
        ("pcie-8gpu-nvbridge", 4, Requirement(TopologyScope.NVLINK), False),
    ],
)
def test_requirements_against_real_servers(
    name: str, k: int, requirement: Requirement, possible: bool
) -> None:
    chooser = GpuSetChooser(topology(name))
    chosen = chooser.choose(ALL >> (8 - chooser.gpu_count), k, requirement)
    assert (chosen is not None) is possible
    if chosen is not None:
        assert chooser.satisfies(chosen, requirement)


def test_table_rank_matches_the_chosen_set() -> None:
    chooser = GpuSetChooser(topology("pcie-8gpu-2socket"))
    table = chooser.table(Requirement(), 2)
    for free in range(256):
        chosen = table.sets[free]
        assert (chosen is None) == (bin(free).count("1") < 2)
        if chosen is not None:
            assert table.rank[free] == chooser.rank(chosen)
            assert all(free >> g & 1 for g in chosen)
