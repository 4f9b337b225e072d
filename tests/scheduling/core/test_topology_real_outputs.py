"""`nvidia-smi topo -m` as real servers printed it (tests/data/nvidia_smi_topo/, each cited in its
sources.json, and the project's data/topologies/), read against facts written by hand from each."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from scheduling.core.topology import NvidiaSmiTopo, read_nvidia_smi_topo
from tests.builders import TOPOLOGY_DIR

REAL_OUTPUTS = Path(__file__).resolve().parents[2] / "data" / "nvidia_smi_topo"


@dataclass(frozen=True)
class Facts:
    gpus: int
    numa: tuple[int, ...]  # NUMA node of each GPU
    links: dict[tuple[int, int], str]  # a few pairs and their link class
    nics: int
    numa_cpus: tuple[int | None, ...]  # CPUs of each NUMA node, None where the output is silent
    switch: tuple[int, ...] = field(default=())  # PCIe switch groups, where worth checking


FACTS: dict[str, Facts] = {
    # NVIDIA/nccl#1453: 8x H100, NV18 everywhere, each GPU PIX to its own NIC, NIC rows trimmed.
    "nccl-1453-h100-nv18-tabs": Facts(
        gpus=8,
        numa=(0, 0, 0, 0, 1, 1, 1, 1),
        links={(0, 1): "NV18", (0, 7): "NV18", (3, 4): "NV18"},
        nics=9,
        numa_cpus=(80, 80),
        switch=tuple(range(8)),
    ),
    # NVIDIA/go-gpuallocator#17: 8x RTX 4090, SYS between all GPUs, two NICs PHB to GPU6.
    "go-gpuallocator-17-rtx4090-tabs": Facts(
        gpus=8,
        numa=(0, 0, 0, 0, 1, 1, 1, 1),
        links={(0, 1): "SYS", (3, 4): "SYS", (6, 7): "SYS"},
        nics=2,
        numa_cpus=(112, 112),
        switch=tuple(range(8)),
    ),
    # Project-HAMi/HAMi#99: one Tesla P4, NUMA Affinity N/A: one NUMA node of CPUs 0-7.
    "hami-99-tesla-p4-numa-na": Facts(gpus=1, numa=(0,), links={}, nics=0, numa_cpus=(8,)),
    # noonghunna/club-3090#1229: 2x RTX 5090 behind the host bridge.
    "club3090-1229-rtx5090-phb-tabs": Facts(
        gpus=2, numa=(0, 0), links={(0, 1): "PHB"}, nics=0, numa_cpus=(64,), switch=(0, 1)
    ),
    # noonghunna/club-3090#46: GPU0 alone on NUMA 1, GPU1-4 in PHB pairs on NUMA 0.
    "club3090-46-five-gpus-spaces": Facts(
        gpus=5,
        numa=(1, 0, 0, 0, 0),
        links={(0, 1): "SYS", (1, 2): "PHB", (3, 4): "PHB", (1, 3): "NODE", (4, 0): "SYS"},
        nics=0,
        numa_cpus=(16, 16),
    ),
    # noonghunna/club-3090#1125: a re-indented copy of a 2-GPU matrix.
    "club3090-1125-indented-copy": Facts(
        gpus=2, numa=(0, 0), links={(0, 1): "NODE", (1, 0): "NODE"}, nics=0, numa_cpus=(16,)
    ),
    # NVIDIA/nccl#428: CPU Affinity only (2020): GPU0 on the first socket's CPUs, GPU1-3 on the
    # second's, so two NUMA nodes numbered by their lowest CPU.
    "nccl-428-tesla-t4-cpu-affinity-only": Facts(
        gpus=4,
        numa=(0, 1, 1, 1),
        links={(0, 1): "SYS", (1, 2): "NODE", (2, 3): "NODE"},
        nics=0,
        numa_cpus=(32, 32),
    ),
    # InternLM/lmdeploy#1944: 2 GPUs on NUMA node 1, node 0 holds no GPU (its CPUs: unknown, not 0);
    # both PXB to mlx5_6/mlx5_7, so behind one switch.
    "lmdeploy-1944-a100-nv12-mlx5-tabs": Facts(
        gpus=2, numa=(1, 1), links={(0, 1): "NV12"}, nics=8, numa_cpus=(None, 96), switch=(0, 0)
    ),
    # pytorch/pytorch#47885: 6 GPUs, PIX pairs (0,1) and (3,4), 3 per socket.
    "pytorch-47885-six-gpus-pix": Facts(
        gpus=6,
        numa=(0, 0, 0, 1, 1, 1),
        links={(0, 1): "PIX", (3, 4): "PIX", (0, 3): "SYS", (2, 5): "SYS", (4, 5): "NODE"},
        nics=0,
        numa_cpus=(36, 36),
        switch=(0, 0, 1, 2, 2, 3),
    ),
    # rapidsai/ucx-py#749: DGX A100 seen from a job: PXB pairs, every GPU on NUMA "6-7" (node 6).
    "ucx-py-749-dgx-a100-pxb-numa-range": Facts(
        gpus=8,
        numa=(6,) * 8,
        links={(0, 1): "PXB", (0, 2): "SYS", (6, 7): "PXB"},
        nics=12,
        numa_cpus=(None, None, None, None, None, None, 32),
        switch=(0, 0, 1, 1, 2, 2, 3, 3),
    ),
}

# The project's own data set (data/topologies/, sourced in its README).
PROJECT_FACTS: dict[str, Facts] = {
    "dgx-a100": Facts(
        gpus=8,
        numa=(3, 3, 1, 1, 7, 7, 5, 5),
        links={(0, 1): "NV12", (0, 7): "NV12"},
        nics=8,
        numa_cpus=(None, 32, None, 32, None, 32, None, 32),
        switch=(0, 0, 1, 1, 2, 2, 3, 3),
    ),
    "dgx-h100": Facts(
        gpus=8,
        numa=(0, 0, 0, 0, 1, 1, 1, 1),
        links={(0, 1): "NV18", (2, 5): "NV18"},
        nics=8,
        numa_cpus=(112, 112),
        switch=tuple(range(8)),
    ),
    "pcie-8gpu-2socket": Facts(
        gpus=8,
        numa=(0, 0, 0, 0, 1, 1, 1, 1),
        links={(0, 1): "PIX", (0, 2): "NODE", (0, 4): "SYS"},
        nics=2,
        numa_cpus=(64, 64),
        switch=(0, 0, 1, 1, 2, 2, 3, 3),
    ),
    "pcie-8gpu-nvbridge": Facts(
        gpus=8,
        numa=(0, 0, 0, 0, 1, 1, 1, 1),
        links={(0, 1): "NV12", (0, 2): "NODE", (3, 4): "SYS"},
        nics=0,
        numa_cpus=(64, 64),
        switch=tuple(range(8)),
    ),
    "t4-2gpu": Facts(gpus=2, numa=(0, 0), links={(0, 1): "PHB"}, nics=0, numa_cpus=(52,)),
}


def _check(read: NvidiaSmiTopo, facts: Facts) -> None:
    topology = read.topology
    assert topology.gpu_count == facts.gpus
    assert topology.gpu_numa == facts.numa
    for (a, b), link in facts.links.items():
        assert topology.links[a][b] == link, (a, b)
    assert len(read.nics) == facts.nics
    assert topology.numa_cpus == facts.numa_cpus
    if facts.switch:
        assert topology.gpu_switch == facts.switch


def test_every_real_output_is_cited_and_has_facts() -> None:
    sources = json.loads((REAL_OUTPUTS / "sources.json").read_text())
    files = sorted(path.stem for path in REAL_OUTPUTS.glob("*.topo"))
    assert files == sorted(FACTS) and len(files) >= 10
    for name in files:
        entry = sources[f"{name}.topo"]
        assert entry["source"].startswith("https://github.com/") and entry["retrieved"]


@pytest.mark.parametrize("name", sorted(FACTS))
def test_real_outputs_give_their_facts(name: str) -> None:
    _check(read_nvidia_smi_topo((REAL_OUTPUTS / f"{name}.topo").read_text()), FACTS[name])


@pytest.mark.parametrize("name", sorted(PROJECT_FACTS))
def test_the_projects_servers_give_their_facts(name: str) -> None:
    _check(read_nvidia_smi_topo((TOPOLOGY_DIR / f"{name}.topo").read_text()), PROJECT_FACTS[name])


def _all_outputs() -> list[Path]:
    return sorted(REAL_OUTPUTS.glob("*.topo")) + sorted(TOPOLOGY_DIR.glob("*.topo"))


@pytest.mark.parametrize("path", _all_outputs(), ids=lambda path: path.stem)
def test_a_terminal_copy_reads_as_the_tab_separated_output(path: Path) -> None:
    """Copied from a terminal, tabs become runs of spaces and trailing whitespace goes."""
    text = path.read_text()
    copy = "\n".join(line.expandtabs(8).rstrip() for line in text.splitlines()) + "\n"
    assert read_nvidia_smi_topo(copy) == read_nvidia_smi_topo(text)


@pytest.mark.parametrize("path", _all_outputs(), ids=lambda path: path.stem)
def test_nic_rows_of_any_length_and_a_nic_legend_read_alike(path: Path) -> None:
    """Rows trimmed of their empty affinity cells (or not), and the NIC Legend block of current
    drivers after the legend, change nothing."""
    text = path.read_text()
    trimmed = "\n".join(line.rstrip() for line in text.splitlines()) + "\n"
    nic_legend = trimmed + "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n"
    expected = read_nvidia_smi_topo(text)
    assert read_nvidia_smi_topo(trimmed) == expected
    assert read_nvidia_smi_topo(nic_legend) == expected
