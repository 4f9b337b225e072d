"""`manage.py explain`: the seeds' annotation and example pod through the seeds' profile, offline;
Kubernetes YAML in (multi-document or List), one JSON object out; bad input named precisely."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import CommandError, call_command

from tests.kube import objects
from tests.kube.helpers import DEPLOY

EXAMPLES = DEPLOY / "examples"
SEEDS_PROFILE = str(DEPLOY / "examples" / "seed-profile.yaml")


def explain(nodes: Path, pod: Path, *extra: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "explain", "--nodes", str(nodes), "--pod", str(pod), *extra, stdout=out, stderr=err
    )
    return out.getvalue(), err.getvalue()


def explain_json(nodes: Path, pod: Path, *extra: str) -> dict[str, Any]:
    out, _ = explain(nodes, pod, "--json", *extra)
    doc: dict[str, Any] = json.loads(out)  # exactly one JSON object, nothing else on stdout
    return doc


def test_the_seeds_annotation_and_pod_through_the_seeds_profile() -> None:
    nodes_file = EXAMPLES / "explain-nodes.yaml"
    doc = explain_json(nodes_file, EXAMPLES / "seed-pod.yaml", "--profile", SEEDS_PROFILE)
    assert set(doc) == {"pod", "feasible", "chosen", "nodes"}
    assert doc["pod"] == "ml-team/llama-ft-0" and doc["feasible"] == 2
    nodes = doc["nodes"]
    # A node whose free GPUs span two NUMA nodes is filtered, the reason naming the counts.
    assert nodes["gpu-a"]["verdict"] == "unschedulable" and nodes["gpu-a"]["score"] is None
    (reason,) = nodes["gpu-a"]["reasons"]
    assert reason.startswith("GPUTopologyAware: free GPUs per NUMA node 2+2: 4 needed on one")
    # The annotation is accepted: the idle annotated node offers a NUMA-local set and is chosen.
    assert nodes["gpu-b"] == {
        "verdict": "feasible",
        "reasons": [],
        "score": nodes["gpu-b"]["score"],
        "scores": {"NodeResourcesFit": pytest.approx(32.7, abs=0.1), "GPUTopologyAware": 100.0},
    }
    # A node without topology passes, ranked below the measured one.
    assert nodes["gpu-c"]["verdict"] == "feasible"
    assert nodes["gpu-c"]["score"] < nodes["gpu-b"]["score"]
    assert doc["chosen"]["node"] == "gpu-b"
    gpu_b = next(
        d for d in yaml.safe_load_all(nodes_file.read_text()) if d["metadata"]["name"] == "gpu-b"
    )
    numa = json.loads(gpu_b["metadata"]["annotations"]["gpu-topology.nvidia.com/info"])["numaNode"]
    chosen = doc["chosen"]["gpuIds"]
    assert len(chosen) == 4 and len({numa[str(g)] for g in chosen}) == 1


def test_the_text_output_reads_the_decision() -> None:
    out, err = explain(
        EXAMPLES / "explain-nodes.yaml", EXAMPLES / "seed-pod.yaml", "--profile", SEEDS_PROFILE
    )
    first, *rows = out.splitlines()
    assert first == "pod ml-team/llama-ft-0: 2/3 nodes feasible; chosen gpu-b, GPUs 0,1,2,3"
    assert rows[0].split()[:2] == ["gpu-a", "unschedulable"] and "2+2" in rows[0]
    assert "gpu-c: GPU topology unknown (no-source)" in err


def write(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_a_node_list_and_the_default_profile(tmp_path: Path) -> None:
    listed = {
        "apiVersion": "v1",
        "kind": "NodeList",
        "items": [objects.node("a"), objects.node("b", gpus=2)],
    }
    nodes = write(tmp_path / "nodes.yaml", listed)
    pod = write(tmp_path / "pod.yaml", objects.pod("p", gpus=4, scheduler="gpusched"))
    doc = explain_json(nodes, pod)
    assert doc["chosen"]["node"] == "a" and doc["feasible"] == 1
    assert doc["nodes"]["b"]["verdict"] == "unschedulableAndUnresolvable"  # 2 GPUs, ever
    assert any("nvidia.com/gpu" in r for r in doc["nodes"]["b"]["reasons"])


def test_a_pod_that_fits_nowhere_has_no_chosen_node(tmp_path: Path) -> None:
    nodes = write(tmp_path / "nodes.yaml", objects.node("a", product="Tesla-T4"))
    pod = objects.pod("p", gpus=2, annotations={"gpusched.io/gpu-models": "NVIDIA-H100-80GB-HBM3"})
    doc = explain_json(nodes, write(tmp_path / "pod.yaml", pod))
    assert doc["chosen"] == {"node": None, "gpuIds": []} and doc["feasible"] == 0
    assert doc["nodes"]["a"]["verdict"] == "unschedulableAndUnresolvable"


def broken_node() -> dict[str, Any]:
    node = objects.node("gpu-x")
    node["status"]["allocatable"]["cpu"] = "lots"
    return node


@pytest.mark.parametrize(
    ("nodes", "pod", "message"),
    [
        ("missing", [objects.pod("p")], r"nodes\.yaml: No such file"),
        ("[", [objects.pod("p")], r"nodes\.yaml: not valid YAML"),
        (
            [broken_node()],
            [objects.pod("p")],
            r"document 1 \(Node gpu-x\): cpu: 'lots' is not a quantity",
        ),
        (
            [{"kind": "ConfigMap", "metadata": {"name": "c"}}],
            [objects.pod("p")],
            r"\(ConfigMap c\): kind must be Node",
        ),
        ([["a list"]], [objects.pod("p")], "document 1: not an object"),
        ([objects.node("a")], [objects.pod("p"), objects.pod("q")], "exactly one Pod, it holds 2"),
        (
            [objects.node("a")],
            [objects.pod("p", annotations={"gpusched.io/topology-policy": "tight"})],
            r"pod\.yaml: document 1 \(Pod p\): 'tight' is not one of",
        ),
    ],
)
def test_bad_input_is_a_command_error_naming_file_and_key(
    tmp_path: Path, nodes: Any, pod: list[Any], message: str
) -> None:
    nodes_file = tmp_path / "nodes.yaml"
    if isinstance(nodes, str) and nodes != "missing":
        nodes_file.write_text(nodes)
    elif not isinstance(nodes, str):
        write(nodes_file, *nodes)
    pod_file = write(tmp_path / "pod.yaml", *pod)
    with pytest.raises(CommandError, match=message):
        explain(nodes_file, pod_file)


def test_a_bad_profile_is_named(tmp_path: Path) -> None:
    nodes = write(tmp_path / "nodes.yaml", objects.node("a"))
    pod = write(tmp_path / "pod.yaml", objects.pod("p"))
    with pytest.raises(CommandError, match="no profile 'nope'"):
        explain(nodes, pod, "--profile", "nope")
