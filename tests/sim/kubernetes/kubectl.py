"""The machine's kubectl against a simulated cluster: each call a real kubectl process on the
kubeconfig the cluster writes, its cache and config kept inside the test's directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sim.kubernetes.launch import SimulatedCluster

TIMEOUT_S = 60


class Kubectl:
    def __init__(self, binary: str, simulated: SimulatedCluster, home: Path) -> None:
        self.binary = binary
        self.simulated = simulated
        kubeconfig = simulated.kube.write_kubeconfig(home / "kubeconfig")
        self.env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(home),
            "KUBECONFIG": str(kubeconfig),
        }

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [self.binary, *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
        if ok:
            assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
        return done

    def waiting(self, *args: str, step: Callable[[], None]) -> subprocess.CompletedProcess[str]:
        """Run a kubectl that waits for the cluster (a delete waits for the object to go) while
        `step` moves the simulated cluster on (its clock, its kubelets)."""
        process = subprocess.Popen(
            [self.binary, *args],
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            for _ in range(600):
                if process.poll() is not None:
                    break
                step()
                try:
                    process.wait(0.05)
                except subprocess.TimeoutExpired:
                    continue
            stdout, stderr = process.communicate(timeout=TIMEOUT_S)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        assert process.returncode == 0, f"kubectl {' '.join(args)}: {stderr}"
        return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def find_kubectl() -> str:
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed (Debian package kubernetes-client)")
    return binary


def header(output: str) -> list[str]:
    """The column names of a kubectl table (names with spaces kept whole)."""
    first = output.splitlines()[0]
    return [name.strip() for name in first.split("  ") if name.strip()]


def rows(output: str) -> list[list[str]]:
    return [line.split() for line in output.splitlines()[1:]]
