"""A stand-in `nvidia-smi` first on PATH: it prints what the test put in its directory (recorded
`nvidia-smi topo -m` of real servers, a --query-gpu listing), or fails as told."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube.agent.nvidia_smi import QUERY_ARGS, TOPO_ARGS
from tests.builders import TOPOLOGY_DIR

SCRIPT = """#!/bin/sh
d="$FAKE_NVIDIA_SMI_DIR"
echo "$*" >> "$d/calls"
if [ -f "$d/fail" ]; then cat "$d/fail" >&2; exit 9; fi
if [ "$*" = "{topo}" ]; then cat "$d/topo.txt"; exit 0; fi
if [ "$*" = "{query}" ]; then cat "$d/query.csv"; exit 0; fi
echo "nvidia-smi: unknown arguments $*" >&2
exit 2
""".format(topo=" ".join(TOPO_ARGS), query=" ".join(QUERY_ARGS))


def recorded(name: str) -> str:
    return (TOPOLOGY_DIR / f"{name}.topo").read_text()


def query_csv(gpus: int, *, mig: tuple[int, ...] = (), model: str = "NVIDIA H100 80GB HBM3") -> str:
    """What --query-gpu=index,uuid,pci.bus_id,name,memory.total,mig.mode.current prints."""
    return "".join(
        f"{i}, GPU-{i:08x}-1111-2222-3333-444455556666, 00000000:{0x18 + 0x10 * i:02X}:00.0, "
        f"{model}, 81559 MiB, {'Enabled' if i in mig else 'Disabled'}\n"
        for i in range(gpus)
    )


def without_gpu(topo: str, gpu: int) -> str:
    """The matrix with one GPU gone (its row and column), as after it fell off the bus."""
    lines = topo.splitlines()
    header = next(k for k, line in enumerate(lines) if line.startswith("\t"))
    column = lines[header].split("\t").index(f"GPU{gpu}")
    out = []
    for k, line in enumerate(lines):
        cells = line.split("\t")
        if k >= header and cells[0] == f"GPU{gpu}":
            continue
        if k >= header and len(cells) > column and not line.startswith("Legend"):
            del cells[column]
        out.append("\t".join(cells))
    return "\n".join(out) + "\n"


class NvidiaSmi:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def serve(self, topo: str, query: str) -> None:
        (self.directory / "fail").unlink(missing_ok=True)
        (self.directory / "topo.txt").write_text(topo)
        (self.directory / "query.csv").write_text(query)

    def fail(self, message: str) -> None:
        (self.directory / "fail").write_text(message)

    def calls(self) -> list[str]:
        path = self.directory / "calls"
        return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def nvidia_smi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NvidiaSmi]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text(SCRIPT)
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    state = tmp_path / "nvidia-smi"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_NVIDIA_SMI_DIR", str(state))
    yield NvidiaSmi(state)
