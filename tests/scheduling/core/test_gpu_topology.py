import pytest

from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.topology import NodeTopology
from scheduling.core.types import NodeSpec, Placement, PodRequest, TopologyScope
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import filter_reason, framework, place_all

SEEDS_PROFILE = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: gpu-topology-scheduler
  plugins:
    filter:
      enabled:
      - name: GPUTopologyAware
    score:
      enabled:
      - name: GPUTopologyAware
        weight: 5
    reserve:
      enabled:
      - name: GPUTopologyAware
  pluginConfig:
  - name: GPUTopologyAware
    args:
      topologyAnnotation: gpu-topology.nvidia.com/info
      preferSameNUMA: true
"""


def node(topology: str, name: str = "n0") -> NodeSpec:
    return make_node(name).topology(topology).cpu(128_000).build()


@pytest.mark.parametrize(
    ("topology", "pod", "fits"),
    [
        ("dgx-h100", make_pod("p").gpus(4).policy("single-numa-node").build(), True),
        ("dgx-h100", make_pod("p").gpus(5).policy("single-numa-node").build(), False),
        ("dgx-h100", make_pod("p").gpus(8).policy("restricted", "nvlink").build(), True),
        (
            "dgx-h100",
            make_pod("p").gpus(8).policy("restricted").build(),
            False,
        ),  # default scope: one NUMA node
        ("dgx-h100", make_pod("p").gpus(8).policy("best-effort").build(), True),
        ("dgx-a100", make_pod("p").gpus(4).policy("single-numa-node").build(), False),
        ("dgx-a100", make_pod("p").gpus(2).policy("single-numa-node").build(), True),
        ("pcie-8gpu-2socket", make_pod("p").gpus(2).policy("restricted", "pcie").build(), True),
        ("pcie-8gpu-2socket", make_pod("p").gpus(4).policy("restricted", "pcie").build(), False),
        ("pcie-8gpu-2socket", make_pod("p").gpus(2).policy("restricted", "nvlink").build(), False),
        ("pcie-8gpu-nvbridge", make_pod("p").gpus(2).policy("restricted", "nvlink").build(), True),
        ("pcie-8gpu-nvbridge", make_pod("p").gpus(3).policy("restricted", "nvlink").build(), False),
        ("pcie-8gpu-nvbridge", make_pod("p").gpus(3).policy("none").build(), True),
    ],
)
def test_policy_and_scope_filtering(topology: str, pod: PodRequest, fits: bool) -> None:
    assert (filter_reason(node(topology), pod) == "") is fits


def test_single_numa_pod_needs_its_cpu_on_the_gpus_numa_node() -> None:
    n = make_node("n").topology("dgx-h100").cpu(100_000).build()  # 50 cores per NUMA node
    assert (
        filter_reason(n, make_pod("p").gpus(4).cpu(50_000).policy("single-numa-node").build()) == ""
    )
    assert "not enough free CPU" in filter_reason(
        n, make_pod("p").gpus(4).cpu(50_001).policy("single-numa-node").build()
    )
    assert filter_reason(n, make_pod("p").gpus(4).cpu(50_001).policy("best-effort").build()) == ""


def test_single_numa_pod_charges_cpu_to_the_numa_node_of_its_gpus() -> None:
    snapshot, (decision,) = place_all(
        [node("dgx-h100")], [make_pod("p").gpus(4).cpu(10_000).policy("single-numa-node").build()]
    )
    assert decision.placement is not None
    numa = {snapshot.chooser(0).topology.gpu_numa[g] for g in decision.placement.gpu_indices}
    assert len(numa) == 1
    assert decision.placement.numa_cpu_milli[numa.pop()] == 10_000


def test_multi_gpu_pod_goes_to_the_node_with_the_closest_set() -> None:
    nodes = [node("pcie-8gpu-2socket", "pcie"), node("dgx-h100", "dgx")]
    _, (decision,) = place_all(nodes, [make_pod("p").gpus(2).build()])
    assert decision.node == "dgx"
    assert decision.placement and decision.placement.scope is TopologyScope.NVLINK


def test_closest_set_beats_a_fuller_node() -> None:
    # "pcie" is fuller (MostAllocated prefers it) but only offers a NUMA-level pair; "bridge"
    # offers NVLink.
    pcie = make_node("pcie").topology("pcie-8gpu-2socket").labels(kind="pcie").build()
    nodes = [pcie, node("pcie-8gpu-nvbridge", "bridge")]
    fillers = [make_pod(f"f{i}").gpus(1).selector(kind="pcie").build() for i in range(4)]
    snapshot, decisions = place_all(nodes, [*fillers, make_pod("p").gpus(2).build()])
    assert {d.node for d in decisions[:4]} == {"pcie"}
    assert decisions[-1].node == "bridge"


def test_seeds_profile_loads_unchanged_and_places_by_topology() -> None:
    fw = framework(SEEDS_PROFILE)
    assert fw.profile.scheduler_name == "gpu-topology-scheduler"
    assert [name for name, _, weight in fw.score if weight == 5] == ["GPUTopologyAware"]
    _, (decision,) = place_all(
        [node("dgx-h100")], [make_pod("p").gpus(4).policy("single-numa-node").build()], fw
    )
    assert decision.placement is not None
    assert decision.placement.gpu_indices in {(0, 1, 2, 3), (4, 5, 6, 7)}


def test_best_fit_is_not_the_seeds_most_free_numa_rule() -> None:
    """The seeds took the NUMA node with the most free GPUs; best fit fills the partly used one
    first."""
    snapshot, decisions = place_all(
        [node("dgx-h100")],
        [
            make_pod("a").gpus(1).build(),
            make_pod("b").gpus(2).policy("single-numa-node").build(),
            make_pod("c").gpus(4).policy("single-numa-node").build(),
        ],
    )
    numa_of = snapshot.chooser(0).topology.gpu_numa
    a, b, c = (d.placement for d in decisions)
    assert a and b and c
    assert {numa_of[g] for g in b.gpu_indices} == {numa_of[a.gpu_indices[0]]}
    assert len(set(a.gpu_indices + b.gpu_indices + c.gpu_indices)) == 7


# --- the seeds' semantics under the seeds' name -------------------------------------------------


def busy(snapshot: ClusterSnapshot, node_name: str, gpus: tuple[int, ...]) -> None:
    """GPUs held by a pod placed before (CPU charged to NUMA node 0)."""
    holder = make_pod(f"holder-{node_name}").gpus(len(gpus)).cpu(0).memory(0).build()
    snapshot.assume(holder, Placement(node_name, gpus, 1000, numa_cpu_milli=(0,)))


def test_seeds_plugin_keeps_a_multi_gpu_pod_without_policy_on_one_numa_node() -> None:
    fw = framework(SEEDS_PROFILE)
    snapshot = ClusterSnapshot([node("dgx-h100", "spread"), node("dgx-h100", "whole")])
    busy(snapshot, "spread", (0, 1, 4, 5))  # free: 2 on NUMA 0, 2 on NUMA 1
    busy(snapshot, "whole", (0,))  # free: 3 on NUMA 0, 4 on NUMA 1
    decision = fw.schedule_one(make_pod("seed").gpus(4).build(), snapshot)
    assert decision.node == "whole" and decision.placement is not None
    assert decision.placement.gpu_indices == (4, 5, 6, 7)
    (reason,) = [
        f["reason"] for f in decision.explain("spread")["filters"] if f["code"] != "Success"
    ]
    assert reason.startswith("free GPUs per NUMA node 2+2: 4 needed on one NUMA node")
    assert "single-numa-node, scope numa, the default for multi-GPU pods" in reason


def test_seeds_plugin_lets_a_pod_that_names_a_policy_have_it() -> None:
    fw = framework(SEEDS_PROFILE)
    snapshot = ClusterSnapshot([node("dgx-h100", "spread")])
    busy(snapshot, "spread", (0, 1, 4, 5))
    spread = fw.schedule_one(make_pod("p").gpus(4).policy("none").build(), snapshot)
    assert spread.node == "spread"


def test_seeds_plugin_passes_nodes_without_topology_and_prefers_known_ones() -> None:
    fw = framework(SEEDS_PROFILE)
    unknown = make_node("unknown").gpus(8).topology_of(None).cpu(128_000).build()
    known = node("pcie-8gpu-2socket", "known")
    snapshot = ClusterSnapshot([unknown, known])
    assert not snapshot.topology_known[0] and snapshot.topology_known[1]
    first = fw.schedule_one(make_pod("a").gpus(4).build(), snapshot)
    assert first.node == "known"  # the guess ranks below a measured NUMA-local set
    second = fw.schedule_one(make_pod("b").gpus(4).build(), snapshot)
    third = fw.schedule_one(make_pod("c").gpus(4).build(), snapshot)
    assert {second.node, third.node} == {"known", "unknown"}  # the unknown node passes


def test_gpusched_topology_plugin_does_not_default_a_policy() -> None:
    snapshot = ClusterSnapshot([node("dgx-h100", "spread")])
    busy(snapshot, "spread", (0, 1, 4, 5))
    assert framework().schedule_one(make_pod("p").gpus(4).build(), snapshot).node == "spread"


def test_a_16_gpu_node_schedules_beside_8_gpu_nodes() -> None:
    numa = tuple(g // 8 for g in range(16))
    links = tuple(tuple("X" if i == j else "NV6" for j in range(16)) for i in range(16))
    hgx = make_node("hgx").topology_of(NodeTopology(numa, tuple(g // 2 for g in range(16)), links))
    nodes = [hgx.cpu(256_000).build(), node("dgx-h100", "dgx")]
    pods = [make_pod(f"p{i}").gpus(8).policy("single-numa-node").build() for i in range(3)]
    pods.append(make_pod("all").gpus(16).build())
    snapshot, decisions = place_all(nodes, pods, framework(SEEDS_PROFILE))
    assert snapshot.gpu_slots == 16
    placed = [d.placement for d in decisions[:3]]
    assert all(p is not None and p.node == "hgx" for p in placed[:2])
    assert sorted(g for p in placed[:2] if p for g in p.gpu_indices) == list(range(16))
    assert decisions[2].node is None  # the DGX H100 has 4 GPUs per NUMA node
    assert decisions[3].node is None and "16" not in decisions[3].summary()[:2]
