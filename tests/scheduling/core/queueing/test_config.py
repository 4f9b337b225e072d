"""Kueue-shaped queue documents: what is read, and that every unknown key is refused by name."""

from __future__ import annotations

import pytest
import yaml

from scheduling.core.queueing.config import (
    BorrowWithinCohortPolicy,
    PreemptionPolicy,
    QueueConfigError,
    QueueingStrategy,
    ReclaimWithinCohort,
    WithinClusterQueue,
)
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.queueing.resources import parse_quantity

EXAMPLE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: h100}
spec:
  nodeLabels: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: ml-cq}
spec:
  cohortName: research
  namespaceSelector: {}
  queueingStrategy: StrictFIFO
  fairSharing: {weight: "2"}
  resourceGroups:
  - coveredResources: [cpu, memory, nvidia.com/gpu]
    flavors:
    - name: h100
      resources:
      - {name: nvidia.com/gpu, nominalQuota: 16, borrowingLimit: 8, lendingLimit: 4}
      - {name: cpu, nominalQuota: 256}
      - {name: memory, nominalQuota: 2Ti}
  preemption:
    reclaimWithinCohort: Any
    withinClusterQueue: LowerPriority
    borrowWithinCohort: {policy: LowerPriority, maxPriorityThreshold: 100}
status: {pendingWorkloads: 3}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a, namespace: ml-team}
spec: {clusterQueue: ml-cq}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: online}
value: 1000
description: serving
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: scavenger}
value: -10
preemptionPolicy: Never
---
"""


def parse(text: str):
    return parse_documents(list(yaml.safe_load_all(text)))


def test_the_kueue_example_reads_as_written() -> None:
    config = parse(EXAMPLE)
    (flavor,) = config.flavors
    assert flavor.node_labels == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert flavor.tolerations[0].operator == "Exists"
    (cq,) = config.cluster_queues
    assert (cq.name, cq.cohort, cq.queueing_strategy, cq.weight) == (
        "ml-cq",
        "research",
        QueueingStrategy.STRICT_FIFO,
        2.0,
    )
    gpu = cq.quota("h100", "nvidia.com/gpu")
    assert (gpu.nominal, gpu.borrowing_limit, gpu.lending_limit) == (16_000, 8_000, 4_000)
    assert cq.quota("h100", "cpu").nominal == 256_000
    assert cq.quota("h100", "memory").nominal == 2 << 20  # MiB
    assert cq.preemption.within_cluster_queue is WithinClusterQueue.LOWER_PRIORITY
    assert cq.preemption.reclaim_within_cohort is ReclaimWithinCohort.ANY
    assert cq.preemption.borrow_within_cohort is BorrowWithinCohortPolicy.LOWER_PRIORITY
    assert cq.preemption.borrow_max_priority_threshold == 100
    (lq,) = config.local_queues
    assert (lq.namespace, lq.name, lq.cluster_queue) == ("ml-team", "team-a", "ml-cq")
    online, scavenger = config.priority_classes
    assert (online.value, online.preemption_policy) == (
        1000,
        PreemptionPolicy.PREEMPT_LOWER_PRIORITY,
    )
    assert (scavenger.value, scavenger.preemption_policy) == (-10, PreemptionPolicy.NEVER)


def test_v1beta1_cohort_spelling_is_accepted() -> None:
    config = parse("kind: ClusterQueue\nmetadata: {name: a}\nspec: {cohort: old}")
    assert config.cluster_queues[0].cohort == "old"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("kind: ClusterQueu\nmetadata: {name: a}", "unknown kind 'ClusterQueu'"),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec: {cohrtName: x}",
            "unknown key 'cohrtName'",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\n"
            "spec: {flavorFungibility: {preference: BorrowingOverPreemption}}",
            "flavorFungibility.preference is not supported by gpusched",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: h\n"
            "      resources: [{name: nvidia.com/gpu, nominalQuot: 1}]",
            "resources[0]: unknown key 'nominalQuot'",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [gpus]\n    flavors: []",
            "unknown resource 'gpus'",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: h\n"
            "      resources: [{name: nvidia.com/gpu, nominalQuota: 1, borrowingLimit: 1}]",
            "borrowingLimit and lendingLimit need a cohortName",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  cohortName: c\n  resourceGroups:\n"
            "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: h\n"
            "      resources: [{name: nvidia.com/gpu, nominalQuota: 1, lendingLimit: 2}]",
            "lendingLimit must not exceed nominalQuota",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [cpu, nvidia.com/gpu]\n    flavors:\n    - name: h\n"
            "      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]",
            "no quota for covered resource 'cpu'",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec: {queueingStrategy: LIFO}",
            "'LIFO' is not one of StrictFIFO, BestEffortFIFO",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\n"
            "spec: {preemption: {withinClusterQueu: Never}}",
            "unknown key 'withinClusterQueu'",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\n"
            "spec: {namespaceSelector: {matchLabels: {team: a}}}",
            "selecting namespaces by 'team' is not supported",
        ),
        ("kind: LocalQueue\nmetadata: {name: q}\nspec: {clusterQueue: a}", "metadata.namespace"),
        (
            "kind: LocalQueue\nmetadata: {name: q, namespace: n}\nspec: {clusterQueue: a, x: 1}",
            "unknown key 'x'",
        ),
        ("kind: ResourceFlavor\nmetadata: {name: f, labels: {}, owner: me}", "unknown key 'owner'"),
        ("kind: ResourceFlavor\nmetadata: {name: F_1}", "must be a DNS-1123 name"),
        (
            "kind: WorkloadPriorityClass\nmetadata: {name: p}\nvalue: high",
            "value must be an integer",
        ),
        (
            "kind: WorkloadPriorityClass\nmetadata: {name: p}\nvalue: 1\nvalu: 2",
            "unknown key 'valu'",
        ),
        (
            "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: ResourceFlavor\nmetadata: {name: f}",
            "apiVersion 'kueue.x-k8s.io/v1alpha1'",
        ),
        (
            "kind: ResourceFlavor\nmetadata: {name: f}\n---\n"
            "kind: ResourceFlavor\nmetadata: {name: f}",
            "ResourceFlavor f is defined twice",
        ),
        # GPUs are counted, not measured: 4Gi GPUs is a typo, refused with the key named.
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: h\n"
            "      resources: [{name: nvidia.com/gpu, nominalQuota: 4Gi}]",
            "resources[0].nominalQuota: nvidia.com/gpu: a count takes a plain number",
        ),
        (
            "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [cpu]\n    flavors:\n    - name: h\n"
            "      resources: [{name: cpu, nominalQuota: 1e999990}]",
            "resources[0].nominalQuota: cpu: '1e999990' is more than any cluster has",
        ),
    ],
)
def test_bad_documents_are_refused_naming_the_key(text, message) -> None:
    with pytest.raises(QueueConfigError, match=None) as error:
        parse(text)
    assert message in str(error.value)


def test_cluster_queues_must_name_existing_flavors() -> None:
    config = parse(
        "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: h100\n"
        "      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]"
    )
    with pytest.raises(QueueConfigError, match="ResourceFlavor 'h100' does not exist"):
        config.check_references()
    config.check_references(frozenset({"h100"}))


@pytest.mark.parametrize(
    ("resource", "value", "canonical"),
    [
        ("cpu", 2, 2000),
        ("cpu", "500m", 500),
        ("cpu", "1.5", 1500),
        ("memory", "64Gi", 65536),
        ("memory", "2Ti", 2 << 20),
        ("memory", 1048576, 1),
        ("nvidia.com/gpu", 16, 16000),
        ("nvidia.com/gpu", "0.5", 500),
        ("nvidia.com/mig-1g.10gb", 7, 7),
    ],
)
def test_quantities(resource, value, canonical) -> None:
    assert parse_quantity(resource, value) == canonical


def test_more_flavors_in_a_group_than_kueue_allows_are_refused() -> None:
    flavors = "".join(
        f"    - name: f{k}\n      resources: [{{name: cpu, nominalQuota: 1}}]\n" for k in range(17)
    )
    text = (
        "kind: ClusterQueue\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: [cpu]\n    flavors:\n" + flavors
    )
    with pytest.raises(QueueConfigError, match=r"17 flavors, more than Kueue's 16 per group"):
        parse(text)
    parse(text.replace("    - name: f16\n      resources: [{name: cpu, nominalQuota: 1}]\n", ""))
