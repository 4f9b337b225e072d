"""A node's GPU topology: NUMA node and PCIe switch of every GPU, and the link between every pair.

Sources: `nvidia-smi topo -m` text (here) and the seeds' node annotation
`gpu-topology.nvidia.com/info` (topology_info).
Pair scores follow NVIDIA's go-gpuallocator (100 per NVLink, PIX 50, PXB 40, PHB 30, NODE 20, SYS
10; see shared/reference/benchmarks-and-traces.md §4), the usual baseline for ranking GPU sets.
"""

from __future__ import annotations

import re
from collections.abc import Callable
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
    # Logical CPUs per NUMA node (index = NUMA id); None for a node whose CPUs no source gave.
    numa_cpus: tuple[int | None, ...] = ()

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
        """Split a node's CPU capacity over its NUMA nodes, by their CPU counts when known.

        A node whose count is unknown (None: `topo -m` says nothing of a NUMA node without GPUs)
        or 0 is weighted as the mean of the known ones: the assumption is made here, once."""
        known = [w for w in self.numa_cpus if w]
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


# What `nvidia-smi topo -m` prints, as published by every driver generation seen (the real outputs
# of tests/data/nvidia_smi_topo/ and data/topologies/, each cited there):
# - a header row naming the devices (GPU0.., then NICs: mlx5_0.. before 2023, NIC0.. with a
#   "NIC Legend" block after), then up to three affinity columns: `CPU Affinity` (every driver),
#   `NUMA Affinity` (about 2020 on), `GPU NUMA ID` (2023 on);
# - one row per device: its name, a link class per device column, the affinity cells. Cells are
#   padded to the header's width with tabs (several in a row where a value is shorter than its
#   label), or with spaces in terminal copies; NIC rows end after their links (every published copy
#   trims the empty affinity cells), and `N/A` stands for an affinity the driver does not know;
# - the legend, which ends the matrix. A driver with more NICs than it shows says so in a line
#   before the header ("76 NICs found in the topology, only displaying 56 in the matrix.").
# No cell holds whitespace, so a row is its whitespace-separated tokens; only when a row has fewer
# affinity tokens than the header has columns (an empty cell) are they placed by their column
# position. Anything else is refused with the line it is on.
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
MAX_OUTPUT_CHARS = 4 << 20  # a 64-device matrix is ~40 KB
MAX_DEVICES = 1024
MAX_NUMA_NODE = 1023  # Linux's MAX_NUMNODES ceiling (CONFIG_NODES_SHIFT <= 10)
MAX_CPU = (1 << 16) - 1
_HEADER_CELL = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_TOKEN = re.compile(r"\S+")
_GPU_NAME = re.compile(r"GPU\d+")
_LINK = re.compile(r"X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS")
_CPU_LIST = re.compile(r"\d{1,6}(?:-\d{1,6})?(?:,\d{1,6}(?:-\d{1,6})?)*")
_NUMA_LIST = re.compile(r"\d{1,6}(?:[-,]\d{1,6})*")
_NIC_NOTE = re.compile(r"\d+ NICs found in the topology, only displaying \d+ in the matrix\.")
_UNKNOWN = ("", "N/A")


@dataclass(frozen=True, slots=True)
class _Cell:
    text: str
    column: int  # display column, tabs expanded to nvidia-smi's stops of 8


def _cells(line: str, pattern: re.Pattern[str]) -> list[_Cell]:
    expanded = line.expandtabs(8)
    return [_Cell(m.group(), m.start()) for m in pattern.finditer(expanded)]


@dataclass
class _Matrix:
    devices: list[str]
    affinity: list[_Cell]  # the affinity columns of the header, in order
    links: dict[str, list[str]]  # device -> its link to each device column
    cells: dict[str, dict[str, str]]  # GPU -> affinity column name -> value ("" when empty)
    lines: dict[str, int]  # device -> its line number


@dataclass(frozen=True)
class NvidiaSmiTopo:
    """What one `nvidia-smi topo -m` output says: the GPUs' topology and the NICs it names."""

    topology: NodeTopology
    nics: tuple[str, ...]  # as the header names them (mlx5_0.. or NIC0..), rows or not


def parse_nvidia_smi_topo(text: str) -> NodeTopology:
    """The GPUs' topology from `nvidia-smi topo -m` (see above); TopologyError names the line."""
    return read_nvidia_smi_topo(text).topology


def read_nvidia_smi_topo(text: str) -> NvidiaSmiTopo:
    if len(text) > MAX_OUTPUT_CHARS:
        raise TopologyError(f"{len(text)} characters; a matrix is at most {MAX_OUTPUT_CHARS}")
    matrix = _read_matrix(text)
    gpus = [name for name in matrix.devices if _GPU_NAME.fullmatch(name)]
    missing = [gpu for gpu in gpus if gpu not in matrix.links]
    if missing:
        raise TopologyError(f"no row for {', '.join(missing)}")
    col = {name: k for k, name in enumerate(matrix.devices)}

    def link(a: str, b: str) -> str:
        return matrix.links[a][col[b]]

    nics = [name for name in matrix.devices if name not in gpus]
    numa, numa_cpus = _numa_placement(matrix, gpus)
    topology = NodeTopology(
        gpu_numa=numa,
        gpu_switch=_switch_groups(gpus, nics, link),
        links=tuple(tuple(link(a, b) for b in gpus) for a in gpus),
        numa_cpus=numa_cpus,
    )
    return NvidiaSmiTopo(topology, tuple(nics))


def _read_matrix(text: str) -> _Matrix:
    matrix: _Matrix | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith(("Legend", "NIC Legend")):
            break
        if matrix is None:
            if _NIC_NOTE.fullmatch(stripped):
                continue
            matrix = _header(line, number)
        else:
            _row(matrix, line, number)
    if matrix is None:
        raise TopologyError("no header row found")
    return matrix


def _header(line: str, number: int) -> _Matrix:
    cells = _cells(line, _HEADER_CELL)
    names = [cell.text for cell in cells]
    if not names or names[0] != "GPU0" or any(_LINK.fullmatch(name) for name in names):
        raise TopologyError(
            f"line {number}: expected the header row (GPU0 GPU1 ... CPU Affinity), "
            f"got {line.strip()[:80]!r}"
        )
    devices = [name for name in names if name not in AFFINITY_COLUMNS]
    affinity = [cell for cell in cells if cell.text in AFFINITY_COLUMNS]
    if names != devices + [cell.text for cell in affinity]:
        raise TopologyError(f"line {number}: a device column follows the affinity columns")
    if len(set(names)) != len(names):
        raise TopologyError(f"line {number}: the header names a column twice")
    if len(devices) > MAX_DEVICES:
        raise TopologyError(f"line {number}: {len(devices)} devices, at most {MAX_DEVICES}")
    return _Matrix(devices, affinity, {}, {}, {})


def _row(matrix: _Matrix, line: str, number: int) -> None:
    cells = _cells(line, _TOKEN)
    name = cells[0].text
    where = f"line {number}: {name}"
    if name not in matrix.devices:
        raise TopologyError(f"line {number}: {name[:40]!r} is not a device of the header")
    if name in matrix.links:
        raise TopologyError(f"{where} appears twice (line {matrix.lines[name]} too)")
    count = len(matrix.devices)
    links = [cell.text for cell in cells[1 : count + 1]]
    if len(links) < count:
        raise TopologyError(
            f"{where} has {len(links)} link cells, the header names {count} devices"
        )
    for device, value in zip(matrix.devices, links, strict=True):
        if not _LINK.fullmatch(value) or (value == "X") != (device == name):
            raise TopologyError(f"{where}: its link to {device} is {value[:20]!r}")
    matrix.links[name] = links
    matrix.lines[name] = number
    rest = cells[count + 1 :]
    if len(rest) > len(matrix.affinity):
        raise TopologyError(
            f"{where} has {len(rest)} cells after its links, the header has "
            f"{len(matrix.affinity)} affinity columns"
        )
    if _GPU_NAME.fullmatch(name):
        matrix.cells[name] = _affinity_cells(matrix.affinity, rest)


def _affinity_cells(columns: list[_Cell], values: list[_Cell]) -> dict[str, str]:
    """The affinity cells of a row, by column name. All there: in order. Some empty (fewer values
    than columns): each value in the last column starting at or before it, when that keeps them in
    order, else in order from the first column."""
    if len(values) < len(columns):
        placed = [
            max((k for k, column in enumerate(columns) if column.column <= value.column), default=0)
            for value in values
        ]
        if all(a < b for a, b in zip(placed, placed[1:], strict=False)):
            return {columns[k].text: value.text for k, value in zip(placed, values, strict=True)}
    return {column.text: value.text for column, value in zip(columns, values, strict=False)}


def _numa_placement(
    matrix: _Matrix, gpus: list[str]
) -> tuple[tuple[int, ...], tuple[int | None, ...]]:
    """Each GPU's NUMA node and the CPUs of each NUMA node, from the affinity columns.

    `NUMA Affinity` names the node (its first, for a range such as `6-7`); `N/A` or nothing is a
    machine without NUMA affinity: node 0. Drivers that print `CPU Affinity` alone (before ~2020)
    are read through it: Linux lists a device's local CPUs as those of its NUMA node, so GPUs
    with the same CPU set share a node, and the nodes are numbered by their lowest CPU. The CPUs
    of a node are those its GPUs list; a node no GPU is on (the output says nothing of it) is
    None: unknown.
    """
    cpus: list[frozenset[int] | None] = []
    for gpu in gpus:
        value = matrix.cells[gpu].get("CPU Affinity", "")
        cpus.append(None if value in _UNKNOWN else _cpu_set(value, matrix.lines[gpu], gpu))
    if any(column.text == "NUMA Affinity" for column in matrix.affinity):
        numa = [_numa_of(matrix.cells[gpu], matrix.lines[gpu], gpu) for gpu in gpus]
    else:
        groups = sorted({group for group in cpus if group}, key=min)
        numa = [groups.index(group) if group else 0 for group in cpus]
    if "CPU Affinity" not in [column.text for column in matrix.affinity]:
        return tuple(numa), ()
    known: dict[int, set[int]] = {}
    for node, group in zip(numa, cpus, strict=True):
        if group is not None:
            known.setdefault(node, set()).update(group)
    size = max(numa, default=0) + 1
    return tuple(numa), tuple(len(known[u]) if u in known else None for u in range(size))


def _numa_of(cells: dict[str, str], number: int, gpu: str) -> int:
    value = cells.get("NUMA Affinity", "")
    if value in _UNKNOWN:
        return 0
    if not _NUMA_LIST.fullmatch(value):
        raise TopologyError(f"line {number}: {gpu}: NUMA Affinity {value[:20]!r} is not a node")
    node = int(re.split(r"[-,]", value)[0])
    if node > MAX_NUMA_NODE:
        raise TopologyError(f"line {number}: {gpu}: NUMA node {node} is beyond {MAX_NUMA_NODE}")
    return node


def _cpu_set(affinity: str, number: int, gpu: str) -> frozenset[int]:
    """`0-55,112-167` -> the CPUs it lists."""
    where = f"line {number}: {gpu}: CPU Affinity {affinity[:40]!r}"
    if not _CPU_LIST.fullmatch(affinity):
        raise TopologyError(f"{where} is not a CPU list")
    cpus: set[int] = set()
    for part in affinity.split(","):
        lo, _, hi = part.partition("-")
        first, last = int(lo), int(hi or lo)
        if first > last or last > MAX_CPU:
            raise TopologyError(f"{where}: {part} is not a range of CPUs 0-{MAX_CPU}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


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
