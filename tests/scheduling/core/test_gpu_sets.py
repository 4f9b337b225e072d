from collections.abc import Callable
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.gpu_sets import (
    RANK_NODE,
    RANK_NUMA,
    RANK_NVLINK,
    RANK_PCIE,
    GpuSetChooser,
    Requirement,
)
from scheduling.core.topology import NodeTopology
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


# --- the tables against a plain reading of the ranking, and nodes with more than 8 GPUs ---------


def reference_choose(
    topo: NodeTopology, free_mask: int, k: int, requirement: Requirement, prefer: bool
) -> tuple[int, ...] | None:
    """The ranking as the module docstring states it, one set at a time: closeness, NUMA-local,
    weakest pair, pair sum, weighted free blocks kept whole, fewest links to what stays free,
    lexicographically first."""
    chooser = GpuSetChooser(topo)
    scores = topo.pair_scores
    blocks = [
        (sum(1 << g for g in group), 100 ** (len(group).bit_length() - 2))
        for group in {
            tuple(range(topo.gpu_count)),
            *(
                tuple(g for g in range(topo.gpu_count) if attribute[g] == value)
                for attribute in (topo.gpu_numa, topo.gpu_switch)
                for value in set(attribute)
            ),
            *islands(topo),
        }
        if len(group) >= 2
    ]
    free = [g for g in range(topo.gpu_count) if free_mask >> g & 1]
    best: tuple[tuple[object, ...], tuple[int, ...]] | None = None
    for gpus in combinations(free, k):
        if not chooser.satisfies(gpus, requirement):
            continue
        pairs = [scores[i][j] for i, j in combinations(gpus, 2)]
        rest_mask = free_mask & ~sum(1 << g for g in gpus)
        rest = [j for j in free if rest_mask >> j & 1]
        key = (
            chooser.rank(gpus),
            prefer and len({topo.gpu_numa[g] for g in gpus}) == 1,
            min(pairs, default=0),
            sum(pairs),
            sum(weight for block, weight in blocks if block & rest_mask == block),
            -sum(scores[i][j] for i in gpus for j in rest),
            tuple(-g for g in gpus),
        )
        if best is None or key > best[0]:
            best = (key, gpus)
    return None if best is None or k == 0 else best[1]


def islands(topo: NodeTopology) -> list[tuple[int, ...]]:
    parent = list(range(topo.gpu_count))
    for i, j in combinations(range(topo.gpu_count), 2):
        if topo.is_nvlink(i, j):
            a, b = parent[i], parent[j]
            parent = [a if p == b else p for p in parent]
    return [tuple(g for g in range(topo.gpu_count) if parent[g] == r) for r in set(parent)]


@st.composite
def random_topologies(draw: st.DrawFn, max_gpus: int = 8) -> NodeTopology:
    n = draw(st.integers(1, max_gpus))
    numa = tuple(draw(st.lists(st.integers(0, 2), min_size=n, max_size=n)))
    switch = tuple(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    nvlink = draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))))

    def link(i: int, j: int) -> str:
        if i == j:
            return "X"
        if (i, j) in nvlink or (j, i) in nvlink:
            return f"NV{1 + (i + j) % 3}"
        if switch[i] == switch[j]:
            return "PIX"
        return "NODE" if numa[i] == numa[j] else "SYS"

    order = range(n)
    return NodeTopology(numa, switch, tuple(tuple(link(i, j) for j in order) for i in order))


requirements = st.sampled_from(
    [
        Requirement(),
        Requirement(TopologyScope.NUMA, same_numa=True),
        Requirement(TopologyScope.PCIE),
        Requirement(TopologyScope.NVLINK),
        Requirement(TopologyScope.NVLINK, same_numa=True),
    ]
)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), topo=random_topologies(), requirement=requirements, prefer=st.booleans())
def test_tables_choose_what_the_ranking_says(
    data: st.DataObject, topo: NodeTopology, requirement: Requirement, prefer: bool
) -> None:
    chooser = GpuSetChooser(topo)
    k = data.draw(st.integers(1, topo.gpu_count))
    for free in data.draw(st.lists(st.integers(0, (1 << topo.gpu_count) - 1), max_size=6)):
        expected = reference_choose(topo, free, k, requirement, prefer)
        assert chooser.choose(free, k, requirement, prefer_same_numa=prefer) == expected
        rank = chooser.ranks(np.array([free]), k, requirement, prefer_same_numa=prefer)[0]
        assert rank == (chooser.rank(expected) if expected else 0)


def sixteen_gpu_nvswitch() -> NodeTopology:
    """An HGX-2 / DGX-2 shaped node (16 GPUs, NVSwitch NV6 between all pairs, 8 GPUs per socket,
    two GPUs per PCIe switch); built here, no recording of such a server is in data/."""
    numa = tuple(g // 8 for g in range(16))
    switch = tuple(g // 2 for g in range(16))
    links = tuple(tuple("X" if i == j else "NV6" for j in range(16)) for i in range(16))
    return NodeTopology(numa, switch, links)


def ten_gpu_pcie() -> NodeTopology:
    """A 10-GPU PCIe server: 5 GPUs per socket behind two switches (3 + 2), no NVLink."""
    numa = tuple(g // 5 for g in range(10))
    switch = (0, 0, 0, 1, 1, 2, 2, 2, 3, 3)

    def link(i: int, j: int) -> str:
        if i == j:
            return "X"
        if switch[i] == switch[j]:
            return "PIX"
        return "NODE" if numa[i] == numa[j] else "SYS"

    return NodeTopology(
        numa, switch, tuple(tuple(link(i, j) for j in range(10)) for i in range(10))
    )


@pytest.mark.parametrize("build", [sixteen_gpu_nvswitch, ten_gpu_pcie])
def test_nodes_with_more_than_8_gpus_fill_their_tables_as_masks_occur(
    build: Callable[[], NodeTopology],
) -> None:
    topo = build()
    chooser = GpuSetChooser(topo)
    everything = (1 << topo.gpu_count) - 1
    numa_local = Requirement(TopologyScope.NUMA, same_numa=True)
    for k in (1, 2, 3, 4, 5):
        for free in (everything, everything & ~0b1011, everything & ~(0xFF >> 1)):
            expected = reference_choose(topo, free, k, numa_local, True)
            assert chooser.choose(free, k, numa_local) == expected
    table = chooser.table(numa_local, 2)
    assert table.lazy and (table.rank == -1).sum() == (1 << topo.gpu_count) - 3


def test_a_16_gpu_node_offers_whole_sockets_and_all_16() -> None:
    chooser = GpuSetChooser(sixteen_gpu_nvswitch())
    full = np.array([0xFFFF, 0xFF00, 0x0F0F], dtype=np.int64)
    numa_local = Requirement(TopologyScope.NUMA, same_numa=True)
    assert chooser.ranks(full, 8, numa_local).tolist() == [RANK_NVLINK, RANK_NVLINK, 0]
    assert chooser.choose(0xFFFF, 16) == tuple(range(16))
    # An 8-GPU pod takes one whole socket of a free node; the other stays whole.
    assert chooser.choose(0xFFFF, 8, numa_local) in {tuple(range(8)), tuple(range(8, 16))}
    # A 2-GPU pod fills the partly used socket and leaves the free one whole.
    chosen = chooser.choose(0xFFFF & ~0b1, 2)
    assert chosen is not None and max(chosen) < 8
