"""Kubernetes pods mirrored as workloads: Kueue's priority-class label and extended resources."""

from __future__ import annotations

import pytest
import yaml

from kube import services as kube_services
from kube.translate import pod_info
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from tests.kube import objects

pytestmark = pytest.mark.django_db


def mirrored(doc):
    info = pod_info(doc)
    assert info.ask is not None
    (pod,) = kube_services.workload_mirror(name=info.name, members=[info], min_count=None)
    return pod


def test_the_priority_class_label_gives_the_workload_its_priority() -> None:
    services.queues_apply(
        config=parse_documents(
            list(
                yaml.safe_load_all("kind: WorkloadPriorityClass\nmetadata: {name: vip}\nvalue: 500")
            )
        )
    )
    doc = objects.pod("p", gpus=1, extra={"example.com/credits": "3"})
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "vip"}
    doc["spec"]["priority"] = 7  # the pod's own PriorityClass value: Kueue's label wins
    pod = mirrored(doc)
    workload = pod.workload
    assert (workload.priority, workload.priority_class_name, workload.priority_class_kind) == (
        500,
        "vip",
        "WorkloadPriorityClass",
    )
    assert pod.extended_resources == {"example.com/credits": 3}


def test_an_unknown_priority_class_label_is_refused_by_name() -> None:
    doc = objects.pod("p", gpus=1)
    doc["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": "nope"}
    with pytest.raises(services.ServiceError, match="WorkloadPriorityClass 'nope' does not exist"):
        mirrored(doc)
