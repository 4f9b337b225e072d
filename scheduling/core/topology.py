"""A node's GPU topology: NUMA node and PCIe switch of every GPU, and the link between every pair.

Sources: `nvidia-smi topo -m` text (here) and the seeds' node annotation
`gpu-topology.nvidia.com/info` (topology_info).
Pair scores follow NVIDIA's go-gpuallocator (100 per NVLink, PIX 50, PXB 40, PHB 30, NODE 20, SYS
10; see shared/reference/benchmarks-and-traces.md §4), the usual baseline for ranking GPU sets.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cached_property

PCIE_LINK_SCORES = {"PIX": 50, "PXB": 40, "PHB": 30, "NODE": 20, "SYS": 10}
NVLINK_SCORE_PER_LINK = 100
_NVLINK = re.compile(r"^NV(\d+)$")
_SAME_SWITCH_LINKS = ("PIX", "PXB")


class TopologyError(ValueError):
    """A topology description that cannot be read; the message names the offending line or key."""


@dataclass(frozen=True)
class NodeTopology:
    gpu_numa: tuple[int, ...]
    gpu_switch: tuple[int, ...]
    links: tuple[tuple[str, ...], ...]  # links[i][j]: "NV18", "PIX", ..., "X" on the diagonal
    numa_cpus: tuple[int, ...] = ()  # logical CPUs per NUMA node (index = NUMA id), when known

    def __post_init__(self) -> None:
        n = len(self.gpu_numa)
        if (
            len(self.gpu_switch) != n
            or len(self.links) != n
            or any(len(row) != n for row in self.links)
        ):
            raise TopologyError(
                "gpu_numa, gpu_switch and the link matrix must all cover the same GPUs"
            )
        for i in range(n):
            for j in range(n):
                if i != j and link_score(self.links[i][j]) == 0:
                    raise TopologyError(
                        f"unknown link {self.links[i][j]!r} between GPU{i} and GPU{j}"
                    )

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_numa)

    @cached_property
    def numa_count(self) -> int:
        return max(max(self.gpu_numa, default=0) + 1, len(self.numa_cpus), 1)

    @cached_property
    def pair_scores(self) -> tuple[tuple[int, ...], ...]:
        return tuple(
            tuple(0 if i == j else link_score(self.links[i][j]) for j in range(self.gpu_count))
            for i in range(self.gpu_count)
        )

    def is_nvlink(self, i: int, j: int) -> bool:
        return _NVLINK.match(self.links[i][j]) is not None

    def numa_cpu_shares(self, cpu_milli: int) -> tuple[int, ...]:
        """Split a node's CPU capacity over its NUMA nodes, by their CPU counts when known."""
        known = [w for w in self.numa_cpus if w > 0]
        # NUMA nodes without GPUs do not show in `topo -m`; assume they are as large as the others.
        typical = sum(known) // len(known) if known else 1
        weights = [w or typical for w in self.numa_cpus]
        weights += [typical] * (self.numa_count - len(weights))
        total = sum(weights) or 1
        shares = [cpu_milli * w // total for w in weights]
        shares[0] += cpu_milli - sum(shares)
        return tuple(shares)


def link_score(link: str) -> int:
    match = _NVLINK.match(link)
    if match:
        return NVLINK_SCORE_PER_LINK * int(match.group(1))
    return PCIE_LINK_SCORES.get(link, 0)


def uniform(gpu_count: int, *, numa_nodes: int = 1, link: str = "PHB") -> NodeTopology:
    """GPUs spread evenly over NUMA nodes, each behind its own switch, `link` within a NUMA node and
    SYS across."""
    per_numa = max(1, -(-gpu_count // numa_nodes))
    numa = tuple(i // per_numa for i in range(gpu_count))
    links = tuple(
        tuple("X" if i == j else (link if numa[i] == numa[j] else "SYS") for j in range(gpu_count))
        for i in range(gpu_count)
    )
    return NodeTopology(gpu_numa=numa, gpu_switch=tuple(range(gpu_count)), links=links)


def parse_nvidia_smi_topo(text: str) -> NodeTopology:
    """Read the matrix printed by `nvidia-smi topo -m` (tab separated; NIC columns and the legend
    are allowed)."""
    header: list[str] | None = None
    rows: dict[str, list[str]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.strip().startswith("Legend"):
            break
        cells = [cell.strip() for cell in line.split("\t")]
        if header is None:
            if cells[0] != "" or "GPU0" not in cells:
                raise TopologyError(
                    f"line {number}: expected the header row starting with a tab and GPU0"
                )
            header = cells[1:]
            continue
        name = cells[0]
        if name in rows:
            raise TopologyError(f"line {number}: device {name} appears twice")
        if len(cells) - 1 < len(header) - 2:
            raise TopologyError(
                f"line {number}: {name} has {len(cells) - 1} cells, header has {len(header)}"
            )
        rows[name] = cells[1:] + [""] * (len(header) + 1 - len(cells))
    if header is None:
        raise TopologyError("no header row found")

    gpus = [name for name in header if re.fullmatch(r"GPU\d+", name)]
    devices = [
        name for name in header if name not in ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
    ]
    missing = [gpu for gpu in gpus if gpu not in rows]
    if missing:
        raise TopologyError(f"no row for {', '.join(missing)}")
    col = {name: k for k, name in enumerate(header)}

    def link(a: str, b: str) -> str:
        return "X" if a == b else rows[a][col[b]]

    links = tuple(tuple(link(a, b) for b in gpus) for a in gpus)
    numa = tuple(_numa_of(rows[gpu], col, gpu) for gpu in gpus)
    nics = [name for name in devices if name not in gpus]
    switch = _switch_groups(gpus, nics, link)
    numa_cpus = _cpus_per_numa(rows, col, gpus, numa)
    return NodeTopology(gpu_numa=numa, gpu_switch=switch, links=links, numa_cpus=numa_cpus)


def _numa_of(row: list[str], col: dict[str, int], gpu: str) -> int:
    value = row[col["NUMA Affinity"]] if "NUMA Affinity" in col else "0"
    if value in ("", "N/A"):
        return 0
    try:
        return int(value.split(",")[0].split("-")[0])
    except ValueError as exc:
        raise TopologyError(f"{gpu}: NUMA Affinity {value!r} is not a number") from exc


def _cpu_count(affinity: str) -> int:
    total = 0
    for part in affinity.split(","):
        if not part or part == "N/A":
            continue
        lo, _, hi = part.partition("-")
        total += (int(hi) if hi else int(lo)) - int(lo) + 1
    return total


def _cpus_per_numa(
    rows: dict[str, list[str]], col: dict[str, int], gpus: list[str], numa: Sequence[int]
) -> tuple[int, ...]:
    if "CPU Affinity" not in col:
        return ()
    counts = [0] * (max(numa, default=0) + 1)
    for gpu, node in zip(gpus, numa, strict=True):
        counts[node] = max(counts[node], _cpu_count(rows[gpu][col["CPU Affinity"]]))
    return tuple(counts)


def _switch_groups(
    gpus: list[str], nics: list[str], link: Callable[[str, str], str]
) -> tuple[int, ...]:
    """GPUs share a PCIe switch when they are PIX/PXB to each other or to the same NIC."""
    parent = list(range(len(gpus)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(i: int, j: int) -> None:
        parent[find(i)] = find(j)

    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus[i + 1 :], start=i + 1):
            if link(a, b) in _SAME_SWITCH_LINKS:
                union(i, j)
    for nic in nics:
        near = [i for i, gpu in enumerate(gpus) if link(gpu, nic) in _SAME_SWITCH_LINKS]
        for i in near[1:]:
            union(near[0], i)
    roots: dict[int, int] = {}
    return tuple(roots.setdefault(find(i), len(roots)) for i in range(len(gpus)))
