"""Kueue's queue objects acting on the Kubernetes side, through the same cycle: an extended
resource quota holds a pod back, and Kueue's priority-class label orders the queue."""

from __future__ import annotations

import pytest
import yaml

from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import Workload
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import scheduler

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

QUEUES = """
kind: ResourceFlavor
metadata: {name: any}
---
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 1000
---
kind: ClusterQueue
metadata: {name: team}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu, example.com/credits]
    flavors:
    - name: any
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 8}
      - {name: example.com/credits, nominalQuota: 10}
---
kind: LocalQueue
metadata: {name: team, namespace: ml-team}
spec: {clusterQueue: team}
"""


def applied(fake: SimulatedKubernetes) -> None:
    """QUEUES as `applyqueues` applies them, in a cluster without Kueue's CRDs (with them, the
    cluster's objects would be the queues: tests/kube/test_kueue_cluster.py)."""
    fake.kueue_versions = ()
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))


def queued_pod(name: str, credits: str, *, priority_class: str = "") -> dict:
    doc = objects.pod(name, gpus=1, extra={"example.com/credits": credits})
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    if priority_class:
        doc["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority_class
    return doc


def test_kueue_quotas_and_priority_classes_act_on_kubernetes_pods(
    fake: SimulatedKubernetes,
) -> None:
    applied(fake)
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(queued_pod("first", "6"))
    fake.add_pod(queued_pod("late-but-urgent", "6", priority_class="urgent"))
    sched = scheduler(fake)
    sched.run_once()
    sched.run_once()
    # 12 credits asked of 10: the urgent pod (its WorkloadPriorityClass) goes first, the other
    # waits for quota and is never bound.
    assert fake.pod("ml-team", "late-but-urgent")["spec"].get("nodeName") == "gpu-a"
    assert fake.pod("ml-team", "first")["spec"].get("nodeName") is None
    urgent = Workload.objects.get(pods__name="late-but-urgent")
    assert (urgent.priority, urgent.priority_class_kind) == (1000, "WorkloadPriorityClass")
    waiting = Workload.objects.get(pods__name="first")
    assert (waiting.state, waiting.pending_reason) == ("Pending", "WaitingForQuota")
    assert "example.com/credits" in waiting.reason


def test_a_pod_naming_an_unknown_priority_class_is_told_why(fake: SimulatedKubernetes) -> None:
    """Alone, or in a burst with others: those are mirrored and placed all the same."""
    applied(fake)
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(queued_pod("p", "1", priority_class="nope"))
    fake.add_pod(queued_pod("q", "1"))
    sched = scheduler(fake)
    sched.run_once()
    sched.run_once()
    assert fake.pod("ml-team", "p")["spec"].get("nodeName") is None
    assert fake.pod("ml-team", "q")["spec"].get("nodeName") == "gpu-a"
    assert list(Workload.objects.values_list("name", flat=True)) == ["q"]
    assert any("WorkloadPriorityClass 'nope' does not exist" in e["note"] for e in fake.events)


def test_a_running_pod_naming_an_unknown_priority_class_is_counted_with_its_own_priority(
    fake: SimulatedKubernetes,
) -> None:
    """Its placement and priority were decided elsewhere: refusing the label would leave what
    it holds uncounted (and must never stop the sync)."""
    applied(fake)
    fake.add_node(objects.node("gpu-a"))
    doc = objects.pod("elsewhere", gpus=2, node_name="gpu-a", phase="Running")
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "nope"}
    doc["spec"]["priority"] = 5
    fake.add_pod(doc)
    report = scheduler(fake).run_once()
    assert report.side_counts.get("pods_adopted") == 1
    workload = Workload.objects.get(pods__name="elsewhere")
    assert (workload.priority, workload.priority_class_name) == (5, "")
