"""Kubernetes JSON -> the core's types: nodes (allocatable, GFD labels, MIG single and mixed,
time-slicing, topology from annotation / NRT) and pods (effective requests, annotations)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kube import nrt
from kube.times import micro_time, rfc3339
from kube.translate import TranslationError, node_spec, pod_info
from scheduling.core.types import SharingMode, Taint, TaintEffect, TopologyPolicy, TopologyScope
from tests.kube import objects


def test_node_allocatable_labels_taints_and_annotation_topology() -> None:
    doc = objects.node(
        "gpu-a",
        cpu="127500m",
        memory="1056Gi",
        taints=[{"key": "nvidia.com/gpu", "effect": "NoSchedule"}],
        unschedulable=True,
    )
    facts = node_spec(doc)
    spec = facts.spec
    assert (spec.cpu_milli, spec.memory_mib) == (127_500, 1056 * 1024)
    assert [g.model for g in spec.gpus] == ["NVIDIA-H100-80GB-HBM3"] * 8
    assert spec.gpus[0].memory_mib == 81559 and spec.gpus[0].sharing is SharingMode.EXCLUSIVE
    assert spec.taints == (Taint("nvidia.com/gpu", "", TaintEffect.NO_SCHEDULE),)
    assert spec.cordoned and spec.labels["kubernetes.io/hostname"] == "gpu-a"
    assert facts.topology_source == "annotation"
    assert spec.topology is not None
    assert spec.topology.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1)
    assert spec.topology.gpu_switch == (0, 0, 1, 1, 2, 2, 3, 3)
    assert spec.topology.links[0][1] == "PIX" and spec.topology.links[0][4] == "SYS"


def test_an_annotation_that_disagrees_with_allocatable_is_not_trusted() -> None:
    doc = objects.node("gpu-a", allocatable={"nvidia.com/gpu": "7"})  # one GPU unhealthy
    facts = node_spec(doc)
    assert len(facts.spec.gpus) == 7 and facts.topology_source == "unknown"
    assert facts.spec.topology is None and facts.topology_unknown == "gpu-count-mismatch"
    assert "lists 8 GPUs, the node has 7" in facts.warnings[0]


@pytest.mark.parametrize("version", ["v1alpha2", "v1alpha1"])
def test_node_resource_topology_both_versions(version: str) -> None:
    info = nrt.parse(objects.nrt("pcie", [(64, 4), (48, 4)], version=version))
    assert info.zone_gpus == (4, 4) and info.zone_cpus == (64, 48)
    assert info.policy == "single-numa-node"
    assert info.scope == ("container" if version == "v1alpha2" else "")
    facts = node_spec(objects.node("pcie", topology={}), nrt=info)
    assert facts.topology_source == "nrt" and facts.kubelet_policy == "single-numa-node"
    topology = facts.spec.topology
    assert topology is not None
    assert topology.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1) and topology.numa_cpus == (64, 48)
    assert topology.links[0][3] == "NODE" and topology.links[0][4] == "SYS"


def test_nrt_quantities_with_suffixes_and_zone_order() -> None:
    doc = {
        "metadata": {"name": "n"},
        "zones": [
            {
                "name": "node-1",
                "type": "Node",
                "resources": [{"name": "cpu", "capacity": "64", "allocatable": "64"}],
            },
            {
                "name": "node-0",
                "type": "Node",
                "resources": [
                    {"name": "cpu", "capacity": "62", "allocatable": "62", "available": "30"},
                    {"name": "memory", "capacity": "270291636224"},
                    {"name": "nvidia.com/gpu", "capacity": "4"},
                ],
            },
        ],
    }
    info = nrt.parse(doc)
    assert info.zone_cpus == (62, 64) and info.zone_gpus == (4, 0) and info.policy == ""
    with pytest.raises(nrt.NrtError, match="zone 'numa0'"):
        nrt.parse({"zones": [{"name": "numa0", "type": "Node"}]})


def test_annotation_topology_takes_its_cpu_split_from_nrt() -> None:
    info = nrt.parse(objects.nrt("gpu-a", [(32, 4), (96, 4)]))
    topology = node_spec(objects.node("gpu-a"), nrt=info).spec.topology
    assert topology is not None and topology.numa_cpus == (32, 96)
    assert topology.gpu_switch == (0, 0, 1, 1, 2, 2, 3, 3)  # still the annotation's switches


def test_mig_single_strategy() -> None:
    doc = objects.node(
        "a100",
        gpus=0,
        product="NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
        labels={"nvidia.com/mig.strategy": "single", "nvidia.com/gpu.slices.gi": "1"},
        allocatable={"nvidia.com/gpu": "56"},
    )
    gpus = node_spec(doc).spec.gpus
    assert len(gpus) == 8
    assert all(g.sharing is SharingMode.MIG and g.mig_layout == ("1g.10gb",) * 7 for g in gpus)
    assert gpus[0].model == "NVIDIA-A100-SXM4-80GB"


def test_mig_mixed_strategy_packs_profiles_onto_gpus() -> None:
    doc = objects.node(
        "a100",
        gpus=0,
        product="NVIDIA-A100-SXM4-80GB",
        labels={"nvidia.com/mig.strategy": "mixed"},
        allocatable={
            "nvidia.com/gpu": "2",
            "nvidia.com/mig-3g.40gb": "2",
            "nvidia.com/mig-1g.10gb": "2",
        },
    )
    gpus = node_spec(doc).spec.gpus
    assert [g.sharing for g in gpus] == [SharingMode.EXCLUSIVE] * 2 + [SharingMode.MIG] * 2
    assert gpus[2].mig_layout == ("3g.40gb", "3g.40gb", "1g.10gb")
    assert gpus[3].mig_layout == ("1g.10gb",)


@pytest.mark.parametrize(
    "allocatable", [{"nvidia.com/gpu": "8"}, {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "8"}]
)
def test_time_slicing_counts_physical_gpus(allocatable: dict[str, str]) -> None:
    doc = objects.node(
        "t4",
        gpus=0,
        product="Tesla-T4-SHARED",
        labels={
            "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.replicas": "4",
            "nvidia.com/gpu.sharing-strategy": "time-slicing",
        },
        allocatable=allocatable,
    )
    gpus = node_spec(doc).spec.gpus
    assert len(gpus) == 2 and {g.sharing for g in gpus} == {SharingMode.TIME_SLICING}
    assert gpus[0].model == "Tesla-T4"


def test_sixteen_gpus_are_kept_and_more_are_cut_with_a_warning() -> None:
    facts = node_spec(objects.node("hgx", gpus=16))
    assert len(facts.spec.gpus) == 16 and facts.topology_source == "annotation"
    assert not facts.warnings
    facts = node_spec(objects.node("big", gpus=20, topology={}))
    assert len(facts.spec.gpus) == 16
    assert any("only the first 16" in w for w in facts.warnings)


def test_pod_requests_as_the_kubelet_counts_them() -> None:
    doc = objects.pod("p", gpus=2, cpu="1500m", memory="3Gi")
    doc["spec"]["initContainers"] = [
        {"name": "fetch", "resources": {"requests": {"cpu": "6", "memory": "1Gi"}}},
        {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
    ]
    doc["spec"]["overhead"] = {"cpu": "250m", "memory": "120Mi"}
    info = pod_info(doc)
    assert info.ask is not None
    # cpu: max(1.5 + 0.5 sidecar, 6 init) + 0.25 overhead; memory: 3Gi + 120Mi
    asked = info.ask.resources
    assert (asked.cpu_milli, asked.memory_mib) == (6250, 3 * 1024 + 120)
    assert asked.gpus == 2  # from limits: extended resources default requests to limits
    assert info.pending_for("gpu-topology-scheduler")


def test_pod_annotations_shares_and_mig() -> None:
    doc = objects.pod(
        "p",
        extra={"gpusched.io/gpu-milli": "250"},
        annotations={
            "gpusched.io/topology-policy": "restricted",
            "gpusched.io/topology-scope": "nvlink",
            "gpusched.io/gpu-models": "NVIDIA-H100-80GB-HBM3, NVIDIA-A100-SXM4-80GB",
            "gpusched.io/service-class": "online",
        },
    )
    request = pod_info(doc).request()
    assert request.gpu_milli == 250 and request.gpus == 0
    assert request.topology_policy is TopologyPolicy.RESTRICTED
    assert request.topology_scope is TopologyScope.NVLINK
    assert request.gpu_models == {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"}
    assert pod_info(doc).service_class == "online"

    mig = pod_info(objects.pod("m", extra={"nvidia.com/mig-3g.40gb": "1"})).request()
    assert (mig.mig_profile, mig.mig_count) == ("3g.40gb", 1)
    single = objects.pod(
        "s", gpus=2, node_selector={"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb"}
    )
    request = pod_info(single).request()
    assert (request.gpus, request.mig_profile, request.mig_count) == (0, "1g.10gb", 2)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"extra": {"gpusched.io/gpu-milli": "1000"}}, "share of one GPU"),
        ({"extra": {"nvidia.com/mig-1g.10gb": "1", "nvidia.com/mig-2g.20gb": "1"}}, "one MIG"),
        ({"gpus": 1, "extra": {"gpusched.io/gpu-milli": "500"}}, "not several"),
        ({"annotations": {"gpusched.io/topology-policy": "strict"}}, "'strict' is not one of"),
        ({"cpu": "two"}, "cpu: 'two' is not a quantity"),
        ({"extra": {"nvidia.com/gpu": "1.5"}}, "must be a whole number"),
        # Bounded cost: refused from the text, never converted (the extender answers at once).
        ({"cpu": "1e600000"}, "cpu: '1e600000' is more than any cluster has"),
        ({"extra": {"example.com/fpga": "1e999990"}}, "is more than any cluster has"),
        ({"extra": {"nvidia.com/gpu": "4Gi"}}, "nvidia.com/gpu: a count takes a plain number"),
    ],
)
def test_pods_gpusched_cannot_represent_say_why(change: dict[str, object], message: str) -> None:
    info = pod_info(objects.pod("bad", **change))  # type: ignore[arg-type]
    assert info.ask is None and message in info.error
    with pytest.raises(TranslationError) as raised:
        info.request()
    assert message in str(raised.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"node_selector": {"k" * 100_000: "v"}}, "spec.nodeSelector 'kkkk"),
        ({"node_selector": {f"k{i}": "v" for i in range(10_000)}}, "at most 32 entries"),
        ({"node_selector": {"zone": "v" * 64}}, "at most 63 characters"),
        ({"annotations": {"gpusched.io/gpu-models": ",".join(map(str, range(17)))}}, "at most 16"),
    ],
)
def test_pods_over_the_size_limits_are_refused_like_the_api_refuses_them(
    change: dict[str, object], message: str
) -> None:
    info = pod_info(objects.pod("big", gpus=1, **change))  # type: ignore[arg-type]
    assert info.ask is None and message in info.error
    assert len(info.error) < 500  # an offending key is quoted by its first characters only


def test_extended_resources_are_carried_through_for_quota() -> None:
    doc = objects.pod(
        "p",
        gpus=1,
        extra={"example.com/credits": "30", "rdma/hca": "1", "ephemeral-storage": "10Gi"},
    )
    doc["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"requests": {"example.com/credits": "40"}}}
    ]
    info = pod_info(doc)
    assert info.ask is not None
    # As the kubelet counts it: the init container's 40 is the pod's peak.
    assert info.ask.resources.extended == {
        "example.com/credits": 40,
        "ephemeral-storage": 10 * 1024,
        "rdma/hca": 1,
    }
    assert dict(info.request().extended) == info.ask.resources.extended
    bad = pod_info(objects.pod("b", extra={"example.com/credits": "500m"}))
    assert bad.ask is None and "not a whole number" in bad.error


def test_the_kueue_priority_class_label_names_a_workload_priority_class() -> None:
    doc = objects.pod("p", gpus=1)
    doc["metadata"]["labels"] = {
        "kueue.x-k8s.io/queue-name": "team-a",
        "kueue.x-k8s.io/priority-class": "sample-priority",
    }
    info = pod_info(doc)
    assert (info.queue_name, info.workload_priority_class) == ("team-a", "sample-priority")
    assert pod_info(objects.pod("q")).workload_priority_class == ""


def test_required_node_affinity_becomes_a_selector_or_is_refused() -> None:
    doc = objects.pod("p", gpus=1)
    term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["eu-1"]}]}
    doc["spec"]["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}
        }
    }
    assert pod_info(doc).request().node_selector == {"zone": "eu-1"}
    term["matchExpressions"][0]["operator"] = "NotIn"
    assert "use spec.nodeSelector" in pod_info(doc).error


def test_tolerations_gates_and_deletion() -> None:
    doc = objects.pod("p", gpus=1, gates=["kueue.x-k8s.io/admission"])
    doc["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"operator": "Exists"},
    ]
    info = pod_info(doc)
    assert info.gated and not info.pending_for("gpu-topology-scheduler")
    tolerations = info.request().tolerations
    assert tolerations[0].tolerates(Taint("nvidia.com/gpu"))
    assert tolerations[1].effect is None and tolerations[1].tolerates(Taint("anything", "x"))
    doc["spec"].pop("schedulingGates")
    doc["metadata"]["deletionTimestamp"] = "2026-01-01T12:00:00Z"
    assert not pod_info(doc).pending_for("gpu-topology-scheduler")


def test_micro_time_always_has_six_digits_and_a_zone() -> None:
    whole = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert micro_time(whole).isoformat() == "2026-01-01T12:00:00.000000Z"
    cet = timezone(timedelta(hours=1))
    assert (
        micro_time(datetime(2026, 1, 1, 13, 0, 0, 5, tzinfo=cet)).isoformat()
        == "2026-01-01T12:00:00.000005Z"
    )
    assert json.dumps(str(micro_time(whole))) == '"2026-01-01T12:00:00.000000Z"'
    assert rfc3339(datetime(2026, 1, 1, 12, 0, 0, 999, tzinfo=UTC)) == "2026-01-01T12:00:00Z"
    with pytest.raises(ValueError, match="aware"):
        micro_time(datetime(2026, 1, 1))  # noqa: DTZ001


# --- the seeds' annotation as written, and what happens when a node changes -----------------------

SEEDS_ANNOTATION = {
    "nodeName": "gpu-a",
    "gpuIds": [0, 1, 2, 3, 4, 5, 6, 7],
    "numaNode": {str(i): i // 4 for i in range(8)},
    "pcieSwitch": {str(i): i // 2 for i in range(8)},
    "totalGpus": 8,
}


def test_the_seeds_annotation_with_node_name_is_accepted() -> None:
    facts = node_spec(objects.node("gpu-a", topology=SEEDS_ANNOTATION))
    assert facts.topology_source == "annotation" and not facts.warnings
    assert facts.topology_unknown is None
    assert facts.spec.topology is not None
    assert facts.spec.topology.gpu_numa == (0, 0, 0, 0, 1, 1, 1, 1)


def test_an_annotation_naming_another_node_is_used_and_noted() -> None:
    facts = node_spec(objects.node("gpu-b", topology=SEEDS_ANNOTATION))
    assert facts.topology_source == "annotation"
    assert facts.warnings == ("node gpu-b: topology annotation names node 'gpu-a'",)


@pytest.mark.parametrize(
    ("annotation", "reason"),
    [
        (None, "no-source"),
        ({"gpuIds": [0, 1]}, "invalid-annotation"),
        ({**SEEDS_ANNOTATION, "numaNode": "0"}, "invalid-annotation"),
    ],
)
def test_a_gpu_node_without_usable_topology_is_unknown_not_guessed(
    annotation: dict[str, object] | None, reason: str
) -> None:
    doc = objects.node("gpu-a")
    doc["metadata"]["annotations"] = (
        {} if annotation is None else {"gpu-topology.nvidia.com/info": json.dumps(annotation)}
    )
    facts = node_spec(doc)
    assert facts.spec.topology is None and facts.topology_source == "unknown"
    assert facts.topology_unknown == reason
    assert "GPU topology unknown" in facts.warnings[-1]
    assert len(facts.spec.gpus) == 8


def test_a_node_without_gpus_has_no_topology_to_know() -> None:
    facts = node_spec(objects.node("cpu-only", gpus=0))
    assert facts.topology_source == "none" and facts.topology_unknown is None
    assert not facts.warnings


def agent_annotation(
    mig: tuple[int, ...] = (), ids: tuple[int, ...] = tuple(range(8))
) -> dict[str, object]:
    """What the topology agent writes: the seeds' keys plus GPU identities."""
    return {
        "nodeName": "gpu-a",
        "gpuIds": list(ids),
        "numaNode": {str(i): i // 4 for i in ids},
        "pcieSwitch": {str(i): i // 2 for i in ids},
        "totalGpus": len(ids),
        "gpus": {str(i): {"uuid": f"GPU-{i}", "mig": i in mig} for i in ids},
    }


def test_the_agents_gpu_identities_name_the_devices() -> None:
    gpus = node_spec(objects.node("gpu-a", topology=agent_annotation())).spec.gpus
    assert [g.uuid for g in gpus] == [f"GPU-{i}" for i in range(8)]


def test_mig_devices_sit_on_the_gpus_the_agent_says_are_in_mig_mode() -> None:
    doc = objects.node(
        "a100",
        product="NVIDIA-A100-SXM4-80GB",
        labels={"nvidia.com/mig.strategy": "mixed"},
        topology=agent_annotation(mig=(1, 6)),
        allocatable={"nvidia.com/gpu": "6", "nvidia.com/mig-1g.10gb": "14"},
    )
    gpus = node_spec(doc).spec.gpus
    assert [g.index for g in gpus] == list(range(8))
    assert [g.index for g in gpus if g.sharing is SharingMode.MIG] == [1, 6]
    assert gpus[6].uuid == "GPU-6" and gpus[6].mig_layout == ("1g.10gb",) * 7


def test_translation_follows_a_node_that_loses_gains_or_repartitions_gpus() -> None:
    doc = objects.node("gpu-a", topology=agent_annotation())
    assert len(node_spec(doc).spec.gpus) == 8
    # The device plugin marks a GPU unhealthy: allocatable drops before the agent sees anything.
    doc["status"]["allocatable"]["nvidia.com/gpu"] = "7"
    lost = node_spec(doc)
    assert len(lost.spec.gpus) == 7 and lost.topology_unknown == "gpu-count-mismatch"
    # The agent rewrites the annotation without the GPU that fell off the bus: known again.
    seven = agent_annotation(ids=(0, 1, 2, 3, 5, 6, 7))
    doc["metadata"]["annotations"]["gpu-topology.nvidia.com/info"] = json.dumps(seven)
    again = node_spec(doc)
    assert again.topology_source == "annotation" and again.spec.topology is not None
    assert again.spec.topology.gpu_numa == (0, 0, 0, 0, 1, 1, 1)
    assert [g.uuid for g in again.spec.gpus][3:5] == ["GPU-3", "GPU-5"]
    # MIG turned on for two GPUs: the layout follows allocatable.
    doc = objects.node(
        "gpu-a",
        labels={"nvidia.com/mig.strategy": "mixed"},
        topology=agent_annotation(mig=(0, 1)),
        allocatable={"nvidia.com/gpu": "6", "nvidia.com/mig-3g.40gb": "4"},
    )
    gpus = node_spec(doc).spec.gpus
    assert [g.mig_layout for g in gpus[:2]] == [("3g.40gb", "3g.40gb")] * 2
    assert {g.sharing for g in gpus[2:]} == {SharingMode.EXCLUSIVE}
