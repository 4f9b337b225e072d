"""What `nvidia-smi` says about a node's GPUs, as the seeds' GPUTopologyInfo plus gpusched's
extensions (scheduling.core.topology_info).

Two commands, both documented by NVIDIA (docs.nvidia.com/deploy/nvidia-smi, `nvidia-smi
--help-query-gpu` for the field names):

    nvidia-smi topo -m                                     the GPU/NIC link matrix, NUMA affinity
    nvidia-smi --query-gpu=index,uuid,pci.bus_id,name,memory.total,mig.mode.current \\
               --format=csv,noheader                       one line per GPU

`memory.total` prints with its unit (`81559 MiB`); `mig.mode.current` is `Enabled`, `Disabled` or
`[N/A]` (a GPU without MIG). Both outputs must agree (the same GPUs, indices 0..n-1) or nothing is
believed: a driver that half answers during an upgrade must not produce an annotation.
"""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Sequence

from scheduling.core.topology import TopologyError, parse_nvidia_smi_topo
from scheduling.core.topology_info import GpuIdentity, TopologyInfo

QUERY_FIELDS = ("index", "uuid", "pci.bus_id", "name", "memory.total", "mig.mode.current")
TOPO_ARGS = ("topo", "-m")
QUERY_ARGS = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader")
_MIB = " MiB"


class ProbeError(RuntimeError):
    """nvidia-smi failed, hung, or printed something that cannot be trusted; the message says
    which command and what was wrong."""


def probe(node: str, *, executable: str = "nvidia-smi", timeout_s: float = 30.0) -> TopologyInfo:
    topo_text = _run(executable, TOPO_ARGS, timeout_s)
    query_text = _run(executable, QUERY_ARGS, timeout_s)
    return combine(node, topo_text, query_text)


def combine(node: str, topo_text: str, query_text: str) -> TopologyInfo:
    """The annotation's facts from the two outputs (pure: the tests feed recorded outputs)."""
    try:
        topology = parse_nvidia_smi_topo(topo_text)
    except TopologyError as exc:
        raise ProbeError(f"nvidia-smi topo -m: {exc}") from exc
    gpus = parse_query_gpu(query_text)
    if len(gpus) != topology.gpu_count:
        raise ProbeError(
            f"nvidia-smi topo -m shows {topology.gpu_count} GPUs, --query-gpu lists {len(gpus)}"
        )
    return TopologyInfo(
        node_name=node,
        gpu_ids=tuple(range(len(gpus))),
        topology=topology,
        gpus=gpus,
        link_detail=True,
    )


def parse_query_gpu(text: str) -> tuple[GpuIdentity, ...]:
    """The --query-gpu lines, in index order; the indices must be 0..n-1, each once."""
    by_index: dict[int, GpuIdentity] = {}
    rows = [row for row in csv.reader(text.splitlines(), skipinitialspace=True) if row]
    for number, row in enumerate(rows, start=1):
        where = f"nvidia-smi --query-gpu line {number}"
        if len(row) != len(QUERY_FIELDS):
            raise ProbeError(f"{where}: {len(row)} fields, expected {len(QUERY_FIELDS)}")
        index, uuid, bus_id, name, memory, mig = (cell.strip() for cell in row)
        if not index.isdigit():
            raise ProbeError(f"{where}: index {index!r} is not a number")
        if not uuid.startswith("GPU-"):
            raise ProbeError(f"{where}: uuid {uuid!r} is not a GPU UUID")
        if not memory.endswith(_MIB) or not memory[: -len(_MIB)].isdigit():
            raise ProbeError(f"{where}: memory.total {memory!r} is not '<n> MiB'")
        if mig not in ("Enabled", "Disabled", "[N/A]"):
            raise ProbeError(f"{where}: mig.mode.current {mig!r} is not Enabled/Disabled/[N/A]")
        if int(index) in by_index:
            raise ProbeError(f"{where}: GPU {index} listed twice")
        by_index[int(index)] = GpuIdentity(
            uuid=uuid,
            pci_bus_id=bus_id,
            name=name,
            memory_mib=int(memory[: -len(_MIB)]),
            mig=mig == "Enabled",
        )
    if sorted(by_index) != list(range(len(by_index))):
        raise ProbeError(f"nvidia-smi --query-gpu: indices {sorted(by_index)} are not 0..n-1")
    if not by_index:
        raise ProbeError("nvidia-smi --query-gpu listed no GPU")
    return tuple(by_index[i] for i in range(len(by_index)))


def _run(executable: str, args: Sequence[str], timeout_s: float) -> str:
    command = " ".join(("nvidia-smi", *args))
    try:
        done = subprocess.run(
            [executable, *args], capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError as exc:
        raise ProbeError(f"{command}: {executable} not found") from exc
    except subprocess.TimeoutExpired as exc:
        raise ProbeError(f"{command}: no answer within {timeout_s:g} s") from exc
    except OSError as exc:
        raise ProbeError(f"{command}: {exc}") from exc
    if done.returncode != 0:
        said = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise ProbeError(
            f"{command}: exit status {done.returncode}" + (f": {said[0][:300]}" if said else "")
        )
    return done.stdout
