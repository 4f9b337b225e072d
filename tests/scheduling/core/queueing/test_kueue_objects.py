"""Kueue objects as Kueue users write them: every point of the compatibility work loads from YAML,
the same objects as the Kubernetes API lists them load to the same configuration, and what gpusched
does not act on is refused with the feature's Kueue name and the reason."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from scheduling.core.queueing import compatibility
from scheduling.core.queueing.config import (
    AdmissionMode,
    ClusterQueue,
    ConsolidationPolicy,
    FungibilityPolicy,
    PriorityKind,
    QueueConfigError,
    StopPolicy,
)
from scheduling.core.queueing.kueue_fields import DEFAULT_RUNTIME_ANNOTATION
from scheduling.core.queueing.kueue_objects import (
    parse_cluster_objects,
    parse_documents,
)

# Kueue-shaped documents, written the way Kueue's documentation teaches them (cohort.md,
# admission_fair_sharing.md, workload_priority_class.md).
KUEUE_FILE = """
apiVersion: kueue.x-k8s.io/v1beta2
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: root-cohort}
spec:
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 12}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: Cohort
metadata: {name: important-org}
spec:
  parentName: root-cohort
  fairSharing: {weight: "0.75"}
  resourceGroups:
  - coveredResources: [cpu]
    flavors:
    - name: default-flavor
      resources: [{name: cpu, nominalQuota: 0, lendingLimit: 4, borrowingLimit: 2}]
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: ClusterQueue
metadata: {name: shared-queue}
spec:
  cohortName: important-org
  namespaceSelector: {}
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  resourceGroups:
  - coveredResources: [cpu, memory, pods, example.com/credits, rdma/hca]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 9}
      - {name: memory, nominalQuota: 36Gi}
      - {name: pods, nominalQuota: 5}
      - {name: example.com/credits, nominalQuota: 1k}
      - {name: rdma/hca, nominalQuota: 4}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: LocalQueue
metadata: {name: team-a-queue, namespace: team-a}
spec:
  clusterQueue: shared-queue
  fairSharing: {weight: "2"}
---
apiVersion: kueue.x-k8s.io/v1beta2
kind: WorkloadPriorityClass
metadata: {name: sample-priority}
value: 10000
description: "Sample priority"
---
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
admissionFairSharing:
  usageHalfLifeTime: "168h"
  usageSamplingInterval: "5m"
  resourceWeights: {cpu: 2.0, memory: 1.0}
"""


def parse(text: str):
    return parse_documents(list(yaml.safe_load_all(text)))


def test_kueue_documents_for_every_point_load() -> None:
    config = parse(KUEUE_FILE)
    root, org = config.cohorts
    assert (root.name, root.parent, org.name, org.parent, org.weight) == (
        "root-cohort",
        "",
        "important-org",
        "root-cohort",
        0.75,
    )
    assert root.flavor_resources()[0][2].nominal == 12_000
    ((_, _, limits),) = org.flavor_resources()
    assert (limits.nominal, limits.lending_limit, limits.borrowing_limit) == (0, 4_000, 2_000)
    (cq,) = config.cluster_queues
    assert cq.admission_mode is AdmissionMode.USAGE_BASED
    assert cq.when_can_borrow is FungibilityPolicy.MAY_STOP_SEARCH  # Kueue's default
    assert cq.quota("default-flavor", "pods").nominal == 5
    assert cq.quota("default-flavor", "example.com/credits").nominal == 1000
    assert cq.quota("default-flavor", "rdma/hca").nominal == 4
    assert cq.quota("default-flavor", "memory").nominal == 36 * 1024
    (lq,) = config.local_queues
    assert (lq.key, lq.weight) == ("team-a/team-a-queue", 2.0)
    (wpc,) = config.priority_classes
    assert (wpc.kind, wpc.value) == (PriorityKind.WORKLOAD, 10000)
    fair = config.admission_fair_sharing
    assert fair is not None
    assert (fair.usage_half_life_s, fair.usage_sampling_interval_s) == (168 * 3600, 300)
    assert dict(fair.resource_weights) == {"cpu": 2.0, "memory": 1.0}
    config.check_references()


def test_the_shipped_demo_file_loads() -> None:
    path = Path(__file__).parents[4] / "scheduling" / "queues" / "demo.yaml"
    config = parse(path.read_text())
    assert {cq.name for cq in config.cluster_queues} == {"vision", "nlp", "inference", "research"}
    assert all(
        cq.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR for cq in config.cluster_queues
    )


def _as_api_returns(doc: dict) -> dict:
    """The object as the API server lists it: server metadata, defaults filled in, a status."""
    out = copy.deepcopy(doc)
    out["metadata"].update(
        uid="0b8f", resourceVersion="812", generation=1, creationTimestamp="2026-01-02T03:04:05Z"
    )
    out["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
    if out["kind"] == "ClusterQueue":
        spec = out["spec"]
        spec.setdefault(
            "flavorFungibility",
            {"whenCanBorrow": "MayStopSearch", "whenCanPreempt": "TryNextFlavor"},
        )
        spec.setdefault(
            "preemption",
            {
                "borrowWithinCohort": {"policy": "Never"},
                "reclaimWithinCohort": "Never",
                "withinClusterQueue": "Never",
            },
        )
        spec.setdefault("queueingStrategy", "BestEffortFIFO")
        spec.setdefault("stopPolicy", "None")
        out["status"] = {"pendingWorkloads": 0, "conditions": []}
    if out["kind"] == "LocalQueue":
        out["spec"].setdefault("stopPolicy", "None")
    return out


def test_objects_as_the_api_lists_them_read_like_the_yaml() -> None:
    docs = [d for d in yaml.safe_load_all(KUEUE_FILE) if d and d["kind"] != "Configuration"]
    by_kind: dict[str, list[dict]] = {}
    for doc in docs:
        item = _as_api_returns(doc)
        del item["kind"]  # list items may come without their kind
        by_kind.setdefault(doc["kind"], []).append(item)
    from_api = parse_cluster_objects(
        resource_flavors=by_kind["ResourceFlavor"],
        cluster_queues=by_kind["ClusterQueue"],
        cohorts=by_kind["Cohort"],
        local_queues=by_kind["LocalQueue"],
        workload_priority_classes=by_kind["WorkloadPriorityClass"],
    )
    from_yaml = parse_documents(docs)
    assert from_api == from_yaml


def test_an_api_list_item_of_another_kind_is_refused() -> None:
    with pytest.raises(QueueConfigError, match=r"clusterqueues\[0\]: kind 'LocalQueue'"):
        parse_cluster_objects(cluster_queues=[{"kind": "LocalQueue", "metadata": {"name": "x"}}])


def _cq(spec: str) -> str:
    return f"kind: ClusterQueue\nmetadata: {{name: a}}\nspec: {spec}"


@pytest.mark.parametrize(
    ("text", "feature"),
    [
        (
            _cq("{admissionChecksStrategy: {admissionChecks: [{name: prov}]}}"),
            "spec.admissionChecksStrategy",
        ),
        (_cq("{admissionChecks: [prov]}"), "spec.admissionChecks"),
        (
            _cq("{concurrentAdmissionPolicy: {migration: {mode: TryPreferredFlavors}}}"),
            "spec.concurrentAdmissionPolicy",
        ),
        (
            _cq("{flavorFungibility: {whenCanPreempt: MayStopSearch}}"),
            "spec.flavorFungibility.whenCanPreempt",
        ),
    ],
)
def test_features_gpusched_does_not_act_on_are_refused_with_the_reason(text, feature) -> None:
    with pytest.raises(QueueConfigError) as error:
        parse(text)
    message = str(error.value)
    assert f"Kueue's {text.split()[1]} {feature} is not supported by gpusched" in message
    kind = text.split()[1]
    assert compatibility.reason(kind, feature) in message


def test_admission_checks_are_refused_because_they_would_admit_held_work() -> None:
    with pytest.raises(QueueConfigError, match="would admit work the admin meant to hold"):
        parse(_cq("{admissionChecksStrategy: {admissionChecks: [{name: provisioning}]}}"))
    # An empty declaration (as a server default may be) asks for nothing and is accepted.
    parse(_cq("{admissionChecksStrategy: {}, admissionChecks: []}"))


@pytest.mark.parametrize(
    ("kind", "words"),
    [
        ("AdmissionCheck", "external controllers"),
        ("ProvisioningRequestConfig", "external controllers"),
        ("Workload", "REST API or as pods"),
    ],
)
def test_kinds_gpusched_does_not_read_are_refused_by_name(kind, words) -> None:
    with pytest.raises(QueueConfigError, match=f"Kueue's {kind} is not supported") as error:
        parse(f"kind: {kind}\nmetadata: {{name: x}}")
    assert words in str(error.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "kind: Cohort\nmetadata: {name: a}\nspec: {parentName: b}\n---\n"
            "kind: Cohort\nmetadata: {name: b}\nspec: {parentName: a}",
            "Cohort parentName makes a cycle: a -> b -> a",
        ),
        ("kind: Cohort\nmetadata: {name: a}\nspec: {parentName: a}", "its own parent"),
        (
            "kind: Cohort\nmetadata: {name: a}\nspec:\n  resourceGroups:\n"
            "  - coveredResources: [cpu]\n    flavors:\n    - name: f\n"
            "      resources: [{name: cpu, nominalQuota: 1, lendingLimit: 1}]",
            "need a cohortName (a parentName for a Cohort)",
        ),
        (
            "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
            "waitForPodsReady: {enable: true}",
            "Configuration key 'waitForPodsReady' is not supported",
        ),
        (
            "kind: Configuration\nadmissionFairSharing: {usageHalfLifeTime: 1week}",
            "'1week' is not a duration",
        ),
        (
            "kind: Configuration\nadmissionFairSharing: {usageSamplingInterval: '0'}",
            "usageSamplingInterval must be greater than 0",
        ),
        (
            "kind: Configuration\nadmissionFairSharing: {resourceWeights: {cpu: -1}}",
            "must be a non-negative number",
        ),
        (_cq("{admissionScope: {admissionMode: Sometimes}}"), "'Sometimes' is not one of"),
        (_cq("{stopPolicy: Pause}"), "'Pause' is not one of None, Hold, HoldAndDrain"),
        (
            _cq("{preemption: {borrowWithinCohort: {policy: LowerPriority}}}"),
            "borrowWithinCohort needs reclaimWithinCohort",
        ),
        (_cq("{fairSharing: {weight: 1e-12}}"), "must be 0 or greater than 10^-9"),
        (
            _cq(
                "{namespaceSelector: {matchExpressions: [{key: team, operator: In, values: [a]}]}}"
            ),
            "selecting namespaces by 'team' is not supported",
        ),
        (
            _cq(
                "{resourceGroups: [{coveredResources: [gpusched.io/gpu-milli], flavors: "
                "[{name: f, resources: [{name: gpusched.io/gpu-milli, nominalQuota: 1}]}]}]}"
            ),
            "counts against nvidia.com/gpu",
        ),
        (
            _cq(
                "{resourceGroups: [{coveredResources: [example.com/credits], flavors: "
                "[{name: f, resources: [{name: example.com/credits, nominalQuota: 0.5}]}]}]}"
            ),
            "not a whole number of units",
        ),
        (
            _cq(
                "{resourceGroups: [{coveredResources: [kubernetes.io/thing], flavors: "
                "[{name: f, resources: [{name: kubernetes.io/thing, nominalQuota: 1}]}]}]}"
            ),
            "the kubernetes.io domain has no such resource",
        ),
        (
            "kind: WorkloadPriorityClass\nmetadata: {name: p}\nvalue: 1\n---\n"
            "kind: WorkloadPriorityClass\nmetadata: {name: p}\nvalue: 2",
            "WorkloadPriorityClass p is defined twice",
        ),
    ],
)
def test_bad_kueue_documents_name_the_problem(text, message) -> None:
    with pytest.raises(QueueConfigError) as error:
        config = parse(text)
        config.check_references(frozenset({"f"}))
    assert message in str(error.value)


@pytest.mark.parametrize(
    ("weight", "read"),
    [("0.75", 0.75), ("750m", 0.75), (2, 2.0), ("0", 0.0), ("2k", 2000.0), ("1e1", 10.0)],
)
def test_a_fair_sharing_weight_is_a_kubernetes_quantity(weight: object, read: float) -> None:
    """Read by the one quantity parser (scheduling/core/quantity.py): every suffix Kubernetes'
    resource.Quantity takes, as Kueue reads fairSharing.weight ("2k" was refused before)."""
    (cq,) = parse(_cq(f"{{fairSharing: {{weight: {weight!r}}}}}")).cluster_queues
    assert cq.weight == read


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        ("'-1'", "must be a non-negative number"),
        (".inf", "must be a non-negative number"),
        ("'many'", "must be a number"),
        ("true", "must be a number"),
        # Beyond any quantity the parser reads (it was read as 10^100 before).
        ("1e100", "must be a number"),
        # Not a quantity: a text Python's Decimal reads (it was "must be a non-negative number").
        ("Infinity", "must be a number"),
    ],
)
def test_a_weight_that_is_no_quantity_is_refused(weight: str, message: str) -> None:
    with pytest.raises(QueueConfigError, match=message):
        parse(_cq(f"{{fairSharing: {{weight: {weight}}}}}"))


def test_cohort_lending_limits_may_exceed_the_cohorts_own_quota() -> None:
    # What a cohort lends up includes its members' quota (Kueue's Cohort webhook allows it).
    config = parse(
        "kind: Cohort\nmetadata: {name: a}\nspec:\n  parentName: r\n  resourceGroups:\n"
        "  - coveredResources: [cpu]\n    flavors:\n    - name: f\n"
        "      resources: [{name: cpu, nominalQuota: 0, lendingLimit: 8}]"
    )
    assert config.cohorts[0].flavor_resources()[0][2].lending_limit == 8000


def test_a_workload_priority_class_and_a_priority_class_may_share_a_name() -> None:
    config = parse(
        "kind: WorkloadPriorityClass\nmetadata: {name: high}\nvalue: 100\n---\n"
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 5"
    )
    assert [(p.kind, p.value) for p in config.priority_classes] == [
        (PriorityKind.WORKLOAD, 100),
        (PriorityKind.POD, 5),
    ]


def test_stop_policies_selectors_and_fungibility_are_read() -> None:
    config = parse(
        _cq(
            "{stopPolicy: HoldAndDrain, flavorFungibility: {whenCanBorrow: TryNextFlavor}, "
            "namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: team-a}}}"
        )
        + "\n---\nkind: LocalQueue\nmetadata: {name: q, namespace: n}\n"
        "spec: {clusterQueue: a, stopPolicy: Hold}"
    )
    (cq,) = config.cluster_queues
    assert cq.stop_policy is StopPolicy.HOLD_AND_DRAIN
    assert cq.when_can_borrow is FungibilityPolicy.TRY_NEXT_FLAVOR
    assert cq.namespace_selector.admits("team-a") and not cq.namespace_selector.admits("team-b")
    assert config.local_queues[0].stop_policy is StopPolicy.HOLD


@pytest.mark.parametrize(
    ("expression", "admitted", "refused"),
    [
        ("{key: kubernetes.io/metadata.name, operator: NotIn, values: [x]}", "y", "x"),
        ("{key: kubernetes.io/metadata.name, operator: In, values: [x, y]}", "y", "z"),
    ],
)
def test_namespace_selector_expressions(expression, admitted, refused) -> None:
    config = parse(_cq(f"{{namespaceSelector: {{matchExpressions: [{expression}]}}}}"))
    selector = config.cluster_queues[0].namespace_selector
    assert selector.admits(admitted) and not selector.admits(refused)


def test_every_refusal_in_the_reader_has_a_table_entry() -> None:
    refused = [f for f in compatibility.FEATURES if f.status == compatibility.REFUSED]
    assert {"spec.admissionChecksStrategy", "spec.concurrentAdmissionPolicy"} <= {
        f.field for f in refused
    }
    for kind, field in [
        ("ClusterQueue", "spec.admissionChecks"),
        ("ClusterQueue", "spec.flavorFungibility.preference"),
        ("Configuration", "every other key"),
    ]:
        assert compatibility.reason(kind, field)


# Kueue's TAS sample (site/static/examples/tas/sample-gpu-queues.yaml), with its Topology in
# each version Kueue serves it in.
TAS_SAMPLE = """
apiVersion: kueue.x-k8s.io/{version}
kind: Topology
metadata: {{name: default}}
spec:
  levels:
  - nodeLabel: cloud.provider.com/topology-block
  - nodeLabel: cloud.provider.com/topology-rack
  - nodeLabel: kubernetes.io/hostname
---
kind: ResourceFlavor
apiVersion: kueue.x-k8s.io/v1beta1
metadata: {{name: tas-flavor}}
spec:
  nodeLabels: {{cloud.provider.com/node-group: tas-group}}
  topologyName: default
"""


@pytest.mark.parametrize("version", ["v1alpha1", "v1beta1", "v1beta2"])
def test_topology_and_a_flavor_naming_it_load(version) -> None:
    config = parse(TAS_SAMPLE.format(version=version))
    (topology,) = config.topologies
    assert topology.name == "default"
    assert topology.levels == (
        "cloud.provider.com/topology-block",
        "cloud.provider.com/topology-rack",
        "kubernetes.io/hostname",
    )
    assert config.flavors[0].topology_name == "default"
    config.check_references()


@pytest.mark.parametrize(
    ("levels", "words"),
    [
        ("[]", "levels must have 1 to 16 entries"),
        ("[{nodeLabel: kubernetes.io/hostname}, {nodeLabel: a/rack}]", "only be the lowest"),
        ("[{nodeLabel: a/rack}, {nodeLabel: a/rack}]", "must be unique"),
        ("[{nodeLabel: 'no spaces'}]", r"levels\[0\].nodeLabel must be a node label key"),
        ("[{nodeLabel: a/rack, weight: 2}]", "unknown key 'weight'"),
    ],
)
def test_bad_topologies_are_refused_naming_the_field(levels, words) -> None:
    with pytest.raises(QueueConfigError, match=words):
        parse(
            f"kind: Topology\napiVersion: kueue.x-k8s.io/v1beta1\nmetadata: {{name: t}}\n"
            f"spec: {{levels: {levels}}}"
        )


def test_a_flavor_naming_a_missing_topology_is_refused() -> None:
    config = parse("kind: ResourceFlavor\nmetadata: {name: f}\nspec: {topologyName: racks}")
    with pytest.raises(QueueConfigError, match="ResourceFlavor f: Topology 'racks' does not exist"):
        config.check_references()
    config.check_references(known_topologies=frozenset({"racks"}))


def cluster_queue_annotated(value: object) -> list[dict[str, object]]:
    return [
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "team", "annotations": {DEFAULT_RUNTIME_ANNOTATION: value}},
            "spec": {"namespaceSelector": {}},
        }
    ]


def test_a_cluster_queue_declares_the_run_time_its_work_is_assumed_to_take() -> None:
    """gpusched.io/default-runtime, a Go duration: the prior of estimated starts (issue 37)."""
    (queue,) = parse_documents(cluster_queue_annotated("1h30m")).cluster_queues
    assert queue.default_runtime_s == 5400.0
    (plain,) = parse_documents(
        [{"kind": "ClusterQueue", "metadata": {"name": "plain"}, "spec": {}}]
    ).cluster_queues
    assert plain.default_runtime_s is None


@pytest.mark.parametrize("value", ["0", "ten minutes", "-5m"])
def test_a_default_run_time_that_is_no_duration_is_refused_naming_the_annotation(
    value: str,
) -> None:
    with pytest.raises(QueueConfigError, match="gpusched.io/default-runtime"):
        parse_documents(cluster_queue_annotated(value))


def test_a_cluster_queue_annotated_never_takes_no_part_in_consolidation() -> None:
    """gpusched.io/consolidation (issue 37): Allowed by default, Never turns it off."""

    def queue(annotations: dict[str, str]) -> ClusterQueue:
        doc = {"kind": "ClusterQueue", "metadata": {"name": "q", "annotations": annotations}}
        (parsed,) = parse_documents([{**doc, "spec": {}}]).cluster_queues
        return parsed

    assert queue({}).consolidation is ConsolidationPolicy.ALLOWED
    assert queue({"gpusched.io/consolidation": "Never"}).consolidation is ConsolidationPolicy.NEVER
    with pytest.raises(QueueConfigError, match="gpusched.io/consolidation"):
        queue({"gpusched.io/consolidation": "Sometimes"})
