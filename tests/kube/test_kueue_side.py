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


def queued_pod(name: str, credits: str, *, priority_class: str = "") -> dict:
    doc = objects.pod(name, gpus=1, extra={"example.com/credits": credits})
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    if priority_class:
        doc["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority_class
    return doc


def test_kueue_quotas_and_priority_classes_act_on_kubernetes_pods(
    fake: SimulatedKubernetes,
) -> None:
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))
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
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(QUEUES))))
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(queued_pod("p", "1", priority_class="nope"))
    scheduler(fake).run_once()
    assert fake.pod("ml-team", "p")["spec"].get("nodeName") is None
    assert not Workload.objects.exists()
    assert any("WorkloadPriorityClass 'nope' does not exist" in e["note"] for e in fake.events)
