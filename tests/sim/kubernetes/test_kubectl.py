"""The real kubectl (the machine's, v1.32 here) against the simulated API: what it sends (protobuf
bodies for built-in kinds from its typed clients, JSON from `-f`, `as=Table` lists, core/v1
event lists for describe) is read as the API server reads it, and what it prints comes from the
server's Table columns. Skipped where kubectl is not installed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.api import KubeApi
from sim.kubernetes.launch import SimulatedCluster
from tests.sim.kubernetes.helpers import Clock
from tests.sim.kubernetes.kubectl import Kubectl, find_kubectl, header, rows
from tests.sim.kubernetes.running import H100, start

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "trainer",
        "namespace": "team",
        "annotations": {"sim.gpusched.io/duration-seconds": "3600"},
    },
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "resources": {"limits": {"nvidia.com/gpu": "2"}},
            }
        ]
    },
}


@pytest.fixture
def sim(clock: Clock) -> Iterator[SimulatedCluster]:
    found = start(clock)
    yield found
    found.close()


@pytest.fixture
def kubectl(sim: SimulatedCluster, tmp_path: Path) -> Kubectl:
    return Kubectl(find_kubectl(), sim, tmp_path)


def test_namespace_pod_events_describe_and_delete(
    kubectl: Kubectl, sim: SimulatedCluster, clock: Clock, tmp_path: Path
) -> None:
    # A typed client's create: the body is protobuf.
    assert kubectl("create", "namespace", "team").stdout.strip() == "namespace/team created"
    namespaces = kubectl("get", "namespaces").stdout
    assert header(namespaces) == ["NAME", "STATUS", "AGE"]
    assert ["team", "Active", "0s"] in rows(namespaces)

    # -f: JSON bodies, client-side apply's annotation, strict field validation asked of the
    # server (it finds fieldValidation in the OpenAPI v3 paths).
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(POD))
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "pod/trainer created"
    assert kubectl("apply", "-f", str(manifest)).stdout.strip() == "pod/trainer unchanged"
    second = tmp_path / "second.yaml"
    second.write_text(yaml.safe_dump({**POD, "metadata": {**POD["metadata"], "name": "eval"}}))
    assert kubectl("create", "-f", str(second)).stdout.strip() == "pod/eval created"
    again = kubectl("create", "-f", str(second), ok=False)
    assert again.returncode == 1
    assert 'pods "eval" already exists' in again.stderr
    server_side = kubectl("apply", "--server-side", "-f", str(manifest), ok=False)
    assert server_side.returncode == 1  # no server-side apply: refused, nothing changed
    assert "accepted media types include: application/json-patch+json" in server_side.stderr

    # gpusched binds it and records the Scheduled event (events.k8s.io/v1); the kubelet starts it.
    api = KubeApi(sim.kube.api_client(), reporting_instance="gpusched-test")
    uid = str(sim.kube.pod("team", "trainer")["metadata"]["uid"])
    assert api.bind(namespace="team", name="trainer", uid=uid, node=H100, annotations={}).ok
    note = f"Successfully assigned team/trainer to {H100}"
    assert api.event(
        namespace="team",
        pod_name="trainer",
        pod_uid=uid,
        kind="Normal",
        reason="Scheduled",
        action="Binding",
        note=note,
        now=clock.now,
    )
    clock.advance(30)
    sim.run_once()

    pods = kubectl("get", "pods", "-n", "team").stdout
    assert header(pods) == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert rows(pods) == [
        ["eval", "0/1", "Pending", "0", "30s"],
        ["trainer", "1/1", "Running", "0", "30s"],
    ]
    wide = kubectl("get", "pods", "-n", "team", "-o", "wide").stdout
    assert header(wide)[5:7] == ["IP", "NODE"] and H100 in wide
    listed = json.loads(kubectl("get", "pods", "-n", "team", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in listed["items"]] == ["eval", "trainer"]
    assert listed["items"][1]["status"]["phase"] == "Running"

    nodes = kubectl("get", "nodes").stdout
    assert header(nodes) == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert rows(nodes)[0][:3] == [H100, "Ready", "<none>"]
    node_doc = json.loads(kubectl("get", "node", H100, "-o", "json").stdout)
    assert node_doc["status"]["allocatable"]["nvidia.com/gpu"] == "8"

    events = kubectl("get", "events", "-n", "team").stdout
    assert header(events) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert "Normal   Scheduled   pod/trainer   " + note in events
    core_events = json.loads(kubectl("get", "events", "-n", "team", "-o", "json").stdout)
    (event,) = core_events["items"]
    assert event["apiVersion"] == "v1" and event["involvedObject"]["name"] == "trainer"
    assert event["message"] == note and event["reportingComponent"] == "gpusched.io/scheduler"

    described = kubectl("describe", "pod", "trainer", "-n", "team").stdout
    assert re.search(rf"^Node:\s+{H100}/10\.0\.0\.2$", described, re.MULTILINE)
    events_part = described.split("Events:")[1].splitlines()
    assert events_part[1].split() == ["Type", "Reason", "Age", "From", "Message"]
    # (describe computes the age itself, from this machine's clock: not compared)
    scheduled = events_part[3].split()
    assert scheduled[:2] == ["Normal", "Scheduled"] and scheduled[3] == "gpusched.io/scheduler"
    assert events_part[3].endswith(note)

    # Graceful deletion: kubectl waits until the kubelet has stopped the pod.
    def step() -> None:
        clock.advance(5)
        sim.run_once()

    deleted = kubectl.waiting("delete", "pod", "trainer", "-n", "team", step=step)
    assert deleted.stdout.strip() == 'pod "trainer" deleted'
    gone = kubectl("get", "pod", "trainer", "-n", "team", ok=False)
    assert 'pods "trainer" not found' in gone.stderr
    kubectl.waiting("delete", "namespace", "team", step=step)
    assert "namespace/team" not in kubectl("get", "namespaces", "-o", "name").stdout.split()


def test_typed_client_creates_in_protobuf(kubectl: Kubectl, sim: SimulatedCluster) -> None:
    """kubectl's `create <kind>` commands and drain's evictions send protobuf bodies."""
    kubectl("create", "namespace", "team")
    kubectl("create", "configmap", "settings", "-n", "team", "--from-literal=lr=0.001")
    settings = sim.kube.get_object("configmaps", "team", "settings")
    assert settings["data"] == {"lr": "0.001"}
    configmaps = kubectl("get", "configmaps", "-n", "team").stdout
    assert header(configmaps) == ["NAME", "DATA", "AGE"] and rows(configmaps)[0][:2] == [
        "settings",
        "1",
    ]
    kubectl("create", "priorityclass", "training", "--value=1000", "--description=batch")
    training = sim.kube.get_object("priorityclasses", "", "training")
    assert (training["value"], training["description"]) == (1000, "batch")
    kubectl("create", "poddisruptionbudget", "web", "-n", "team", "--selector=app=web",
            "--min-available=50%")  # fmt: skip
    budget = sim.kube.get_object("poddisruptionbudgets", "team", "web")
    assert budget["spec"]["minAvailable"] == "50%"
    assert budget["spec"]["selector"] == {"matchLabels": {"app": "web"}}

    sim.kube.add_pod(
        {"metadata": {"name": "loose", "namespace": "team"},
         "spec": {"nodeName": H100, "containers": [{"name": "main", "image": "x"}]}}
    )  # fmt: skip
    sim.run_once()
    drained = kubectl("drain", H100, "--force", "--grace-period=0").stdout
    assert "pod/loose evicted" in drained and f"node/{H100} drained" in drained
    assert sim.kube.objects("pods", "team") == []
    assert sim.kube.get_object("nodes", "", H100)["spec"]["unschedulable"] is True


def test_jobs_with_kubectl(kubectl: Kubectl, sim: SimulatedCluster, clock: Clock) -> None:
    """`kubectl create job` (a protobuf Job with its pod template), get, describe, delete."""
    kubectl("create", "namespace", "team")
    created = kubectl("create", "job", "pi", "-n", "team", "--image=perl", "--", "perl", "-e", "1")
    assert created.stdout.strip() == "job.batch/pi created"
    stored = sim.kube.get_object("jobs", "team", "pi")
    assert stored["spec"]["template"]["spec"]["containers"][0]["command"] == ["perl", "-e", "1"]
    assert stored["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    clock.advance(42)
    jobs = kubectl("get", "jobs", "-n", "team").stdout
    assert header(jobs) == ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    assert rows(jobs) == [["pi", "Running", "0/1", "42s", "42s"]]
    (pod,) = sim.kube.objects("pods", "team")
    everything = kubectl("get", "all", "-n", "team").stdout
    assert f"pod/{pod['metadata']['name']}" in everything and "job.batch/pi" in everything
    described = kubectl("describe", "job", "pi", "-n", "team").stdout
    assert "Pods Statuses:    1 Active (0 Ready) / 0 Succeeded / 0 Failed" in described
    events_part = described.split("Events:")[1].splitlines()
    created_line = events_part[3].split()
    assert (
        created_line[:2] == ["Normal", "SuccessfulCreate"] and created_line[3] == "job-controller"
    )
    assert events_part[3].endswith(f"Created pod: {pod['metadata']['name']}")

    # kubectl deletes with propagationPolicy=Background: the pod goes too.
    assert kubectl("delete", "job", "pi", "-n", "team").stdout.strip() == 'job.batch "pi" deleted'
    assert sim.kube.objects("pods", "team") == []  # never bound: gone at once
    assert kubectl("get", "jobs", "-n", "team", ok=False).stderr.strip() == (
        "No resources found in team namespace."
    )
