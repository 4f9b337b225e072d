"""The node annotation `gpu-topology.nvidia.com/info`: the seeds' contract, read and written.

The seeds define it as the JSON of a Go struct,

    type GPUTopologyInfo struct {
        NodeName   string      `json:"nodeName"`
        GPUIds     []int       `json:"gpuIds"`
        NUMANode   map[int]int `json:"numaNode"`    // GPU id -> NUMA node
        PCIeSwitch map[int]int `json:"pcieSwitch"`  // GPU id -> PCIe switch
        TotalGPUs  int         `json:"totalGpus"`
    }

and Go's encoding/json writes a `map[int]int` with string keys (`{"0": 1}`), so that is what a node
carries; integer keys (a hand-written or YAML-converted value) are read the same. A NUMA node of -1
is what Linux reports for a device without NUMA affinity (sysfs `numa_node`): one NUMA node, 0.

gpusched's optional extensions (written by `manage.py topologyagent`; a reader that knows only the
seeds' keys ignores them, as Go's decoder does):

    "links":    {"0": {"1": "NV18", "2": "PIX", ...}, ...}   `nvidia-smi topo -m` class of each pair
    "numaCpus": {"0": 112, "1": 112}                         logical CPUs of the NUMA nodes known
    "gpus":     {"0": {"uuid": "GPU-...", "pciBusId": "00000000:18:00.0",
                       "name": "NVIDIA H100 80GB HBM3", "memoryMiB": 81559, "mig": false}, ...}

Without `links`, links are derived from the seeds' fields: same switch PIX, same NUMA node NODE,
else SYS (no NVLink is assumed). gpusched's GPU index k is the k-th id of `gpuIds`. Unknown
top-level keys are ignored and reported, never a reason to drop the seeds' facts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from scheduling.core.topology import NodeTopology, TopologyError, link_score

SEEDS_KEYS = ("nodeName", "gpuIds", "numaNode", "pcieSwitch", "totalGpus")
EXTENSION_KEYS = ("links", "numaCpus", "gpus")
_GPU_KEYS: dict[str, type] = {
    "uuid": str,
    "pciBusId": str,
    "name": str,
    "memoryMiB": int,
    "mig": bool,
}
NO_NUMA_AFFINITY = -1


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """What `nvidia-smi --query-gpu` says about one GPU (empty when the writer did not say)."""

    uuid: str = ""
    pci_bus_id: str = ""
    name: str = ""
    memory_mib: int = 0
    mig: bool = False  # MIG mode enabled: the GPU is partitioned into MIG devices


@dataclass(frozen=True)
class TopologyInfo:
    node_name: str
    gpu_ids: tuple[int, ...]  # nvidia-smi indices, in gpusched index order
    topology: NodeTopology
    gpus: tuple[GpuIdentity, ...] = ()  # per GPU, in gpu_ids order; () when not given
    link_detail: bool = False  # links measured (`links` given), not derived from NUMA / switch
    ignored_keys: tuple[str, ...] = ()

    def to_json(self) -> str:
        """The annotation value: the seeds' keys first, then the extensions."""
        ids = [str(i) for i in self.gpu_ids]
        topology = self.topology
        doc: dict[str, Any] = {
            "nodeName": self.node_name,
            "gpuIds": list(self.gpu_ids),
            "numaNode": dict(zip(ids, topology.gpu_numa, strict=True)),
            "pcieSwitch": dict(zip(ids, topology.gpu_switch, strict=True)),
            "totalGpus": len(self.gpu_ids),
        }
        if self.link_detail:
            doc["links"] = {
                a: {b: topology.links[i][j] for j, b in enumerate(ids) if i != j}
                for i, a in enumerate(ids)
            }
        if any(n is not None for n in topology.numa_cpus):
            # A NUMA node whose CPUs are unknown is left out, never written as 0 CPUs.
            doc["numaCpus"] = {str(u): n for u, n in enumerate(topology.numa_cpus) if n is not None}
        if self.gpus:
            doc["gpus"] = {
                gpu_id: _identity_doc(identity)
                for gpu_id, identity in zip(ids, self.gpus, strict=True)
            }
        return json.dumps(doc, separators=(",", ":"))

    def same_facts(self, other: TopologyInfo) -> bool:
        """Equal as far as scheduling and device identity go (formatting and ignored keys aside)."""
        return (
            self.node_name,
            self.gpu_ids,
            self.topology,
            self.gpus,
            self.link_detail,
        ) == (other.node_name, other.gpu_ids, other.topology, other.gpus, other.link_detail)


def parse_topology_info(value: str | Mapping[str, Any]) -> TopologyInfo:
    """Read the annotation (its JSON text, or the already decoded object). TopologyError names the
    offending key."""
    doc: Any = value
    if isinstance(value, str):
        try:
            doc = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TopologyError(f"annotation is not JSON: {exc.msg} at position {exc.pos}") from exc
    if not isinstance(doc, Mapping):
        raise TopologyError("annotation must be a JSON object")
    node_name = doc.get("nodeName", "")
    if not isinstance(node_name, str):
        raise TopologyError("nodeName must be a string")
    ids = _gpu_ids(doc.get("gpuIds"))
    total = doc.get("totalGpus", len(ids))
    if not _is_int(total) or total != len(ids):
        raise TopologyError(f"totalGpus is {total!r} but gpuIds lists {len(ids)} GPUs")
    numa = [max(n, 0) for n in _per_gpu(doc, "numaNode", ids, minimum=NO_NUMA_AFFINITY)]
    switch = _per_gpu(doc, "pcieSwitch", ids, minimum=0)
    links = _links(doc["links"], ids) if "links" in doc else _derived_links(numa, switch)
    topology = NodeTopology(
        gpu_numa=tuple(numa),
        gpu_switch=_renumber(switch),
        links=links,
        numa_cpus=_numa_cpus(doc.get("numaCpus"), max(numa, default=0) + 1),
    )
    return TopologyInfo(
        node_name=node_name,
        gpu_ids=ids,
        topology=topology,
        gpus=_identities(doc["gpus"], ids) if "gpus" in doc else (),
        link_detail="links" in doc,
        ignored_keys=tuple(sorted(k for k in doc if k not in SEEDS_KEYS + EXTENSION_KEYS)),
    )


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _gpu_ids(value: object) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise TopologyError("gpuIds must be a list of GPU indices")
    for k, gpu in enumerate(value):
        if not _is_int(gpu) or gpu < 0:
            raise TopologyError(f"gpuIds[{k}] must be a non-negative integer, got {gpu!r}")
    if len(set(value)) != len(value):
        raise TopologyError("gpuIds lists a GPU twice")
    return tuple(value)


def _int_key(raw: object) -> int | None:
    if _is_int(raw):
        return raw
    return int(raw) if isinstance(raw, str) and raw.isdigit() else None


def _keyed(table: Mapping[Any, Any], key: str, ids: Sequence[int]) -> dict[int, Any]:
    """A map keyed by GPU id, with string keys (as Go writes them) or integer keys."""
    known = set(ids)
    out: dict[int, Any] = {}
    for raw, value in table.items():
        gpu = _int_key(raw)
        if gpu is None:
            raise TopologyError(f"{key}: key {raw!r} is not a GPU id")
        if gpu not in known:
            raise TopologyError(f"{key}[{raw}]: GPU {gpu} is not in gpuIds")
        if gpu in out:
            raise TopologyError(f"{key}: GPU {gpu} appears twice")
        out[gpu] = value
    return out


def _per_gpu(doc: Mapping[str, Any], key: str, ids: Sequence[int], *, minimum: int) -> list[int]:
    table = doc.get(key)
    if not isinstance(table, Mapping):
        raise TopologyError(f"{key} must map every GPU id to a number")
    values = _keyed(table, key, ids)
    out = []
    for gpu in ids:
        if gpu not in values:
            raise TopologyError(f"{key} has no entry for GPU {gpu}")
        value = values[gpu]
        if not _is_int(value) or value < minimum:
            raise TopologyError(f"{key}[{gpu}] must be an integer >= {minimum}, got {value!r}")
        out.append(value)
    return out


def _links(table: object, ids: Sequence[int]) -> tuple[tuple[str, ...], ...]:
    if not isinstance(table, Mapping):
        raise TopologyError("links must map GPU id to {GPU id: link class}")
    rows = _keyed(table, "links", ids)
    matrix: list[list[str]] = []
    for i, a in enumerate(ids):
        row = rows.get(a)
        if not isinstance(row, Mapping):
            raise TopologyError(f"links has no row for GPU {a}")
        cells = _keyed(row, f"links[{a}]", ids)
        matrix.append([])
        for j, b in enumerate(ids):
            cell = "X" if i == j else cells.get(b)
            if not isinstance(cell, str) or (i != j and link_score(cell) == 0):
                raise TopologyError(f"links[{a}][{b}] must be a link class (NV#, PIX, ...)")
            matrix[-1].append(cell)
    return tuple(tuple(row) for row in matrix)


def _derived_links(numa: Sequence[int], switch: Sequence[int]) -> tuple[tuple[str, ...], ...]:
    def derived(i: int, j: int) -> str:
        if i == j:
            return "X"
        if switch[i] == switch[j]:
            return "PIX"
        return "NODE" if numa[i] == numa[j] else "SYS"

    order = range(len(numa))
    return tuple(tuple(derived(i, j) for j in order) for i in order)


def _numa_cpus(table: object, numa_count: int) -> tuple[int | None, ...]:
    if table is None:
        return ()
    if not isinstance(table, Mapping):
        raise TopologyError("numaCpus must map NUMA node to a CPU count")
    counts: dict[int, int] = {}
    for raw, value in table.items():
        node = _int_key(raw)
        if node is None or not _is_int(value) or value < 0:
            raise TopologyError(f"numaCpus[{raw}] must be a CPU count of a NUMA node")
        counts[node] = value
    size = max(numa_count, max(counts, default=-1) + 1)
    return tuple(counts.get(u) for u in range(size))  # None: a NUMA node the writer left out


def _identities(table: object, ids: Sequence[int]) -> tuple[GpuIdentity, ...]:
    if not isinstance(table, Mapping):
        raise TopologyError("gpus must map GPU id to {uuid, pciBusId, name, memoryMiB, mig}")
    rows = _keyed(table, "gpus", ids)
    out = []
    for gpu in ids:
        row = rows.get(gpu, {})
        if not isinstance(row, Mapping):
            raise TopologyError(f"gpus[{gpu}] must be an object")
        for field, kind in _GPU_KEYS.items():
            value = row.get(field, kind())
            if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
                raise TopologyError(f"gpus[{gpu}].{field} must be a {kind.__name__}")
        out.append(
            GpuIdentity(
                uuid=row.get("uuid", ""),
                pci_bus_id=row.get("pciBusId", ""),
                name=row.get("name", ""),
                memory_mib=row.get("memoryMiB", 0),
                mig=row.get("mig", False),
            )
        )
    return tuple(out)


def _identity_doc(identity: GpuIdentity) -> dict[str, Any]:
    doc: dict[str, Any] = {}
    if identity.uuid:
        doc["uuid"] = identity.uuid
    if identity.pci_bus_id:
        doc["pciBusId"] = identity.pci_bus_id
    if identity.name:
        doc["name"] = identity.name
    if identity.memory_mib:
        doc["memoryMiB"] = identity.memory_mib
    if identity.mig:
        doc["mig"] = True
    return doc


def _renumber(groups: Sequence[int]) -> tuple[int, ...]:
    seen: dict[int, int] = {}
    return tuple(seen.setdefault(group, len(seen)) for group in groups)
