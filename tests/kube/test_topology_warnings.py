"""A GPU node without usable topology is reported (a Warning event on the Node, the gauge
gpusched_nodes_topology_unknown), never silently guessed; facts arriving again are reported too."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from kube.topology_warnings import KNOWN_REASON, UNKNOWN_REASON
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.metrics import registry
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import scheduler

pytestmark = [pytest.mark.django_db]

SEEDS_ANNOTATION = {
    "nodeName": "gpu-a",
    "gpuIds": list(range(8)),
    "numaNode": {str(i): i // 4 for i in range(8)},
    "pcieSwitch": {str(i): i // 2 for i in range(8)},
    "totalGpus": 8,
}


def unknown_nodes(reason: str) -> float | None:
    return registry.get_sample_value("gpusched_nodes_topology_unknown", {"reason": reason})


def until(sched: SchedulingCycle, done: Callable[[], bool], tries: int = 50) -> None:
    """Cycles until the informers have delivered the change (a watch round may come first)."""
    for _ in range(tries):
        sched.run_once()
        if done():
            return
    raise AssertionError("the change never arrived")


def node_events(fake: SimulatedKubernetes) -> list[tuple[str, str, str]]:
    return [
        (e["metadata"]["namespace"], e["type"], e["reason"])
        for e in fake.events
        if e["regarding"]["kind"] == "Node"
    ]


def test_a_node_without_topology_is_reported_once_and_again_when_facts_arrive(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a", topology={"gpuIds": "broken"}))
    fake.add_node(objects.node("gpu-b"))  # the seeds' annotation: nothing to report
    sched = scheduler(fake)

    sched.run_once()
    sched.run_once()
    assert node_events(fake) == [("default", "Warning", UNKNOWN_REASON)]
    (event,) = [e for e in fake.events if e["regarding"]["kind"] == "Node"]
    assert event["regarding"]["name"] == "gpu-a" and "gpuIds must be a list" in event["note"]
    assert unknown_nodes("invalid-annotation") == 1 and unknown_nodes("no-source") == 0

    def annotate(node: objects.Obj) -> None:
        node["metadata"]["annotations"] = {
            "gpu-topology.nvidia.com/info": json.dumps(SEEDS_ANNOTATION)
        }

    fake.update_node("gpu-a", annotate)
    until(sched, lambda: node_events(fake)[-1] == ("default", "Normal", KNOWN_REASON))
    assert unknown_nodes("invalid-annotation") == 0

    fake.delete_node("gpu-b")
    fake.update_node("gpu-a", lambda n: n["metadata"].pop("annotations"))
    until(sched, lambda: node_events(fake)[-1] == ("default", "Warning", UNKNOWN_REASON))
    assert unknown_nodes("no-source") == 1
    fake.delete_node("gpu-a")
    until(sched, lambda: unknown_nodes("no-source") == 0)
