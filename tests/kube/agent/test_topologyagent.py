"""The topology agent end to end: a stand-in `nvidia-smi` printing recorded outputs of real
servers, the fake API server through the official client, the agent's own health endpoint."""

from __future__ import annotations

import json
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from common.process_metrics import LoopHealth, serve_metrics, stop_serving
from kube.agent import agent as agent_module
from kube.agent.agent import PROBE_FAILED, UPDATED, TopologyAgent
from kube.api import KubeApi
from kube.translate import node_spec
from scheduling.core.topology import parse_nvidia_smi_topo
from scheduling.core.topology_info import parse_topology_info
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.builders import TOPOLOGY_NAMES
from tests.dashboard.servers import free_port
from tests.kube import objects
from tests.kube.agent.conftest import NvidiaSmi, query_csv, recorded, without_gpu
from tests.kube.helpers import kubeconfig

KEY = "gpu-topology.nvidia.com/info"


def make_agent(fake: SimulatedKubernetes, node: str = "gpu-a") -> TopologyAgent:
    api = KubeApi(fake.api_client(), reporting_instance="agent-0", reporting_controller="agent")
    return TopologyAgent(api, node, timeout_s=10, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC))


def written(fake: SimulatedKubernetes, node: str = "gpu-a") -> str | None:
    value = (node_doc(fake, node)["metadata"].get("annotations") or {}).get(KEY)
    return value if isinstance(value, str) else None


def node_patches(fake: SimulatedKubernetes) -> list[str]:
    return [path for method, path in fake.requests if method == "PATCH" and "/nodes/" in path]


def agent_events(fake: SimulatedKubernetes) -> list[tuple[str, str]]:
    return [(e["type"], e["reason"]) for e in fake.events if e["reportingController"] == "agent"]


def probes(result: str) -> float:
    value = agent_module.registry.get_sample_value(
        "gpusched_topology_agent_probes_total", {"result": result}
    )
    return value or 0.0


@pytest.mark.parametrize("name", TOPOLOGY_NAMES)
def test_the_annotation_written_is_the_topology_of_the_same_topo_output(
    fake: SimulatedKubernetes, nvidia_smi: NvidiaSmi, name: str
) -> None:
    text = recorded(name)
    expected = parse_nvidia_smi_topo(text)
    fake.add_node(objects.node("gpu-a", gpus=expected.gpu_count, topology={}))
    nvidia_smi.serve(text, query_csv(expected.gpu_count))

    report = make_agent(fake).run_once()

    assert report.written and report.gpus == expected.gpu_count and not report.error
    value = written(fake)
    assert value is not None
    info = parse_topology_info(value)
    assert info.topology == expected and info.node_name == "gpu-a" and info.link_detail
    assert [g.uuid for g in info.gpus] == [
        f"GPU-{i:08x}-1111-2222-3333-444455556666" for i in range(expected.gpu_count)
    ]
    # The seeds' keys are all there, so a reader of only the seeds' contract reads it too.
    doc = json.loads(value)
    assert {"nodeName", "gpuIds", "numaNode", "pcieSwitch", "totalGpus"} <= set(doc)
    assert agent_events(fake) == [("Normal", UPDATED)]
    # And the scheduler's translation of that node plans on exactly this topology.
    facts = node_spec(node_doc(fake))
    assert facts.topology_source == "annotation" and facts.spec.topology == expected


def node_doc(fake: SimulatedKubernetes, name: str = "gpu-a") -> objects.Obj:
    return fake.get_object("nodes", "", name)


def test_unchanged_facts_write_nothing_and_a_changed_output_rewrites(
    fake: SimulatedKubernetes, nvidia_smi: NvidiaSmi
) -> None:
    node = objects.node("gpu-a", topology={})
    node["metadata"]["annotations"]["example.com/owner"] = "lab"
    fake.add_node(node)
    agent = make_agent(fake)
    nvidia_smi.serve(recorded("pcie-8gpu-2socket"), query_csv(8))
    assert agent.run_once().written
    assert not agent.run_once().written  # the same facts: one GET, no PATCH
    assert len(node_patches(fake)) == 1

    # A driver upgrade that changes the links (here: NVLink bridges appear).
    nvidia_smi.serve(recorded("pcie-8gpu-nvbridge"), query_csv(8))
    assert agent.run_once().written
    value = written(fake)
    assert value is not None and parse_topology_info(value).topology.is_nvlink(0, 1)

    # A GPU gone: the matrix and the query lose it, the annotation follows.
    nvidia_smi.serve(without_gpu(recorded("pcie-8gpu-nvbridge"), 3), query_csv(7))
    assert agent.run_once().written
    value = written(fake)
    assert value is not None and parse_topology_info(value).topology.gpu_count == 7
    # MIG mode switched on one GPU: identities change, the annotation follows.
    nvidia_smi.serve(without_gpu(recorded("pcie-8gpu-nvbridge"), 3), query_csv(7, mig=(0,)))
    assert agent.run_once().written
    value = written(fake)
    assert value is not None and parse_topology_info(value).gpus[0].mig
    assert len(node_patches(fake)) == 4
    notes = [e["note"] for e in fake.events if e["reason"] == UPDATED]
    changed = "GPUs 8 -> 7, GPU identities or MIG mode, links or NUMA/switch placement"
    assert notes[2] == f"rewritten: {changed} (7 GPUs)"
    # Other annotations of the node are left alone by the patch.
    assert node_doc(fake)["metadata"]["annotations"].keys() >= {KEY}


DAMAGE = {
    "cpu list": lambda text: text.replace("0-55,112-167", "zz", 1),
    "numa node": lambda text: text.replace("\t0\n", "\t999999\n", 1),
    "short row": lambda text: text.replace(
        "\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tNV18\tPIX", "", 1
    ),
    "huge": lambda text: text + "x" * (5 << 20),  # past the bound: refused before it is parsed
}


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("exit", "exit status 9: NVML: Driver/library version mismatch"),
        ("garbled", "nvidia-smi topo -m: "),
        ("disagree", "shows 8 GPUs, --query-gpu lists 6"),
        # Outputs that made the agent raise ValueError / MemoryError (issue 33's low item).
        ("cpu list", "line 3: GPU0: CPU Affinity 'zz' is not a CPU list"),
        ("numa node", "line 3: GPU0: NUMA node 999999 is beyond 1023"),
        ("short row", "line 3: GPU0 has 10 link cells, the header names 16 devices"),
        ("huge", "characters; a matrix is at most 4194304"),
    ],
)
def test_a_failing_nvidia_smi_is_reported_and_writes_nothing(
    fake: SimulatedKubernetes, nvidia_smi: NvidiaSmi, fault: str, message: str
) -> None:
    fake.add_node(objects.node("gpu-a", topology={}))
    agent = make_agent(fake)
    nvidia_smi.serve(recorded("dgx-h100"), query_csv(8))
    assert agent.run_once().written
    good = written(fake)
    failed_before = probes("failed")

    if fault == "exit":
        nvidia_smi.fail("NVML: Driver/library version mismatch")
    elif fault == "garbled":
        nvidia_smi.serve(recorded("dgx-h100")[:300], query_csv(8))  # cut off mid-matrix
    elif fault in DAMAGE:
        nvidia_smi.serve(DAMAGE[fault](recorded("dgx-h100")), query_csv(8))
    else:
        nvidia_smi.serve(recorded("dgx-h100"), query_csv(6))
    first, second = agent.run_once(), agent.run_once()

    assert message in first.error and not first.written and not second.written
    assert written(fake) == good and len(node_patches(fake)) == 1  # the last good one stays
    assert agent_events(fake) == [("Normal", UPDATED), ("Warning", PROBE_FAILED)]  # once
    assert probes("failed") - failed_before == 2

    nvidia_smi.serve(recorded("dgx-h100"), query_csv(8))
    recovered = agent.run_once()
    assert not recovered.written and not recovered.error


def test_the_agents_metrics_are_served_beside_the_loops_probes(
    fake: SimulatedKubernetes, nvidia_smi: NvidiaSmi
) -> None:
    health = LoopHealth(stuck_after_s=30)
    server = serve_metrics(agent_module.registry, health, "127.0.0.1", free_port())
    assert server is not None
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        fake.add_node(objects.node("gpu-a", topology={}))
        nvidia_smi.serve(recorded("t4-2gpu"), query_csv(2, model="Tesla T4"))
        make_agent(fake).run_once()
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            text = response.read().decode()
        assert "gpusched_topology_agent_gpus 2.0" in text
        assert "gpusched_topology_agent_annotation_writes_total" in text
        assert 'gpusched_topology_agent_probes_total{result="ok"}' in text
    finally:
        stop_serving(server)


def test_the_command_runs_one_step_for_node_name(
    fake: SimulatedKubernetes,
    nvidia_smi: NvidiaSmi,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake.add_node(objects.node("gpu-b", gpus=2, topology={}))
    nvidia_smi.serve(recorded("t4-2gpu"), query_csv(2, model="Tesla T4"))
    monkeypatch.setenv("NODE_NAME", "gpu-b")
    call_command("topologyagent", "--once", "--kubeconfig", str(kubeconfig(tmp_path, fake.url)))
    value = written(fake, "gpu-b")
    assert value is not None and parse_topology_info(value).node_name == "gpu-b"
    assert nvidia_smi.calls() == [
        "topo -m",
        "--query-gpu=index,uuid,pci.bus_id,name,memory.total,mig.mode.current"
        " --format=csv,noheader",
    ]


def test_the_command_fails_a_step_whose_probe_failed_and_writes_nothing(
    fake: SimulatedKubernetes, nvidia_smi: NvidiaSmi, tmp_path: Path
) -> None:
    fake.add_node(objects.node("gpu-b", gpus=2, topology={}))
    nvidia_smi.fail("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    with pytest.raises(CommandError, match="exit status 9: NVIDIA-SMI has failed"):
        call_command(
            "topologyagent",
            "--once",
            "--node",
            "gpu-b",
            "--kubeconfig",
            str(kubeconfig(tmp_path, fake.url)),
        )
    assert not node_patches(fake)
