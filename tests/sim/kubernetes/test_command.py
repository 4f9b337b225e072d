"""`manage.py fakekube` as a process: it prints its URLs, answers the official client through the
kubeconfig it writes (and kubectl, when installed), runs pods on its kubelets, serves /metrics,
and stops cleanly on SIGTERM."""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kube.api import connect
from telemetry.parsing import parse_exposition
from tests.sim.kubernetes.helpers import pod

ROOT = Path(__file__).resolve().parents[3]
SPEC = {"nodePools": [{"name": "h100", "count": 2, "topology": "dgx-h100"}]}


class Running:
    def __init__(
        self, process: subprocess.Popen[str], api_url: str, metrics_url: str, kubeconfig: Path
    ):
        self.process, self.api_url, self.metrics_url, self.kubeconfig = (
            process,
            api_url,
            metrics_url,
            kubeconfig,
        )


def read_urls(process: subprocess.Popen[str], timeout_s: float = 90.0) -> tuple[str, str]:
    """The API and metrics URLs fakekube prints (read on a thread: readline blocks)."""
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    api = metrics = ""
    while not (api and metrics) and time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1.0)
        except queue.Empty:
            assert process.poll() is None, "fakekube exited early"
            continue
        if found := re.search(r"Kubernetes API on (http://\S+)", line):
            api = found.group(1)
        if found := re.search(r"DCGM metrics on (http://\S+)", line):
            metrics = found.group(1)
    assert api and metrics, "fakekube did not print its URLs"
    return api, metrics


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def fakekube(tmp_path: Path) -> Iterator[Running]:
    spec = tmp_path / "two.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    kubeconfig = tmp_path / "kubeconfig"
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "fakekube",
            "--cluster",
            str(spec),
            "--port",
            "0",
            "--metrics-port",
            str(free_port()),
            "--speed",
            "60",
            "--kubeconfig",
            str(kubeconfig),
            "--interval",
            "0.05",
        ],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": "", "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        api, metrics = read_urls(process)
        yield Running(process, api, metrics, kubeconfig)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


def test_the_command_serves_the_cluster_and_stops_on_sigterm(fakekube: Running) -> None:
    assert fakekube.api_url.startswith("http://127.0.0.1:")
    api_client = connect(kubeconfig=str(fakekube.kubeconfig))
    core: Any = client.CoreV1Api(api_client)
    assert [n.metadata.name for n in core.list_node().items] == ["h100-0000", "h100-0001"]

    body = pod(
        "job",
        nodeName="h100-0001",
        gpus=1,
        metadata={"annotations": {"sim.gpusched.io/duration-seconds": "60"}},
    )
    core.create_namespaced_pod("default", body)  # bound at creation: the kubelet runs it
    deadline, phases = time.monotonic() + 30, list[str]()
    while time.monotonic() < deadline and "Succeeded" not in phases:
        phase = core.read_namespaced_pod("job", "default").status.phase
        if not phases or phases[-1] != phase:
            phases.append(phase)
        time.sleep(0.05)
    assert phases[-1] == "Succeeded"  # 60 simulated seconds is one wall second at speed 60

    with urllib.request.urlopen(fakekube.metrics_url, timeout=10) as response:
        parsed, stats = parse_exposition(response.read().decode())
    assert stats.skipped == 0
    assert {s.labels["Hostname"] for s in parsed} == {"h100-0000", "h100-0001"}

    api_client.close()
    fakekube.process.send_signal(signal.SIGTERM)
    assert fakekube.process.wait(20) == 0


def test_kubectl_reads_it_through_the_written_kubeconfig(fakekube: Running) -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed (Debian package kubernetes-client)")
    env = {**os.environ, "KUBECONFIG": str(fakekube.kubeconfig)}
    result = subprocess.run(
        [kubectl, "get", "nodes", "-o", "name"], env=env, capture_output=True, text=True, timeout=60
    )
    if result.returncode != 0 and "kubectl" not in result.stderr and not result.stdout:
        pytest.skip(f"kubectl does not run here: {result.stderr.strip()[:200]}")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["node/h100-0000", "node/h100-0001"]
    table = subprocess.run(
        [kubectl, "get", "nodes"], env=env, capture_output=True, text=True, timeout=60
    )
    assert table.stdout.splitlines()[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert "Ready" in table.stdout.splitlines()[1]
