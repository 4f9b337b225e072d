"""FGD's fragmentation measure and score on the hand-computed examples of
reference/fgd-and-baselines.md §5, plus the plugin's caching and workload handling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import AllocationDraft
from scheduling.core.plugin_args import ProfileError
from scheduling.core.plugins import fragmentation
from scheduling.core.plugins.fragmentation import (
    FragmentationMeasure,
    TaskType,
    WorkloadMix,
    node_fragmentation,
    typical_mix,
)
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import NodeSpec, Placement, PodRequest
from scheduling.profile_files import load_profile
from tests.builders import make_node, make_pod

# Worked-example workload T: a (4000, 1x500) 0.5, b (8000, 2x1000) 0.3, c (2000, CPU-only) 0.2
T = WorkloadMix(
    [
        (TaskType(4000, 500, 1), 0.5),
        (TaskType(8000, 1000, 2), 0.3),
        (TaskType(2000), 0.2),
    ]
)


def node(name: str, model: str, gpus: int, cpu: int) -> NodeSpec:
    return make_node(name).gpus(gpus, model=model).cpu(cpu).memory(1 << 20).build()


def with_free(snapshot: ClusterSnapshot, name: str, free: list[int]) -> None:
    """Bring a node's GPUs to the given free milli by assuming CPU-less pods on them."""
    for gpu, milli in enumerate(free):
        used = 1000 - milli
        if used == 0:
            continue
        pod = (
            PodRequest(uid=f"{name}-{gpu}", gpus=1)
            if used == 1000
            else PodRequest(uid=f"{name}-{gpu}", gpu_milli=used)
        )
        snapshot.assume(pod, Placement(name, (gpu,), used, numa_cpu_milli=(0,)))


def share(milli: int, cpu: int) -> PodRequest:
    return make_pod(f"s{milli}").share(milli).cpu(cpu).memory(0).build()


def fgd(mix: WorkloadMix, **args: object) -> Framework:
    profile = load_profile("fgd")
    plugin_args = {"Fragmentation": {"workload": mix.to_args(), **args}}
    return Framework(type(profile)(profile.scheduler_name, profile.plugins, plugin_args))


# --- The measure --------------------------------------------------------------------------------


def test_node_a_fragmentation_is_700() -> None:
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000)])
    with_free(snapshot, "A", [1000, 1000, 300, 0])
    # a fits: 0.5 * 300; b fits (2 full GPUs): 0.3 * 300; c: 0.2 * 2300
    assert node_fragmentation(snapshot, T).tolist() == pytest.approx([150 + 90 + 460])


def test_cpu_short_type_counts_the_whole_idle() -> None:
    snapshot = ClusterSnapshot([node("A", "G2", 4, 6_000)])
    with_free(snapshot, "A", [1000, 1000, 300, 0])
    # b now lacks CPU: 0.3 * 2300 = 690
    assert node_fragmentation(snapshot, T).tolist() == pytest.approx([150 + 690 + 460])


def test_node_b_and_no_gpu_nodes() -> None:
    snapshot = ClusterSnapshot(
        [node("B", "T4", 2, 32_000), make_node("cpu").cpu(8000).memory(1024).build()]
    )
    with_free(snapshot, "B", [600, 0])
    # a fits (GPU 0 has 600 >= 500) -> 0; b lacks GPUs -> 0.3 * 600; c -> 0.2 * 600
    assert node_fragmentation(snapshot, T).tolist() == pytest.approx([300, 0])


def test_model_constraint_and_upstream_vector() -> None:
    # no access: a V100M32-only type counts a T4 node's whole idle
    mix = WorkloadMix([(TaskType(2000, 250, 1, frozenset({"V100M32"})), 1.0)])
    snapshot = ClusterSnapshot([node("t4", "T4", 2, 10_000), node("v", "V100M32", 2, 10_000)])
    with_free(snapshot, "t4", [1000, 200])
    with_free(snapshot, "v", [1000, 200])
    assert node_fragmentation(snapshot, mix).tolist() == pytest.approx([1200, 200])
    # pkg/utils/frag_test.go: (6000, 1x465) p=0.0933 on a 1080 node, cpuL 1000, free
    # [200, 1000, 1000, 500] -> 251.91 (CPU short: the whole 2700 idle)
    one = WorkloadMix([(TaskType(6000, 465, 1), 1.0)])
    snapshot = ClusterSnapshot([node("g", "1080", 4, 1000)])
    with_free(snapshot, "g", [200, 1000, 1000, 500])
    assert 0.0933 * node_fragmentation(snapshot, one)[0] == pytest.approx(251.91)


# --- The FGD decision ---------------------------------------------------------------------------


def test_fgd_picks_node_b_with_scores_41_and_54() -> None:
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000), node("B", "T4", 2, 32_000)])
    with_free(snapshot, "A", [1000, 1000, 300, 0])
    with_free(snapshot, "B", [600, 0])
    decision = fgd(T).schedule_one(share(500, 4000), snapshot)
    (record,) = decision.scores
    assert record.plugin == "Fragmentation"
    assert dict(zip(decision.candidates.tolist(), record.scores.tolist(), strict=True)) == {
        0: 41.0,
        1: 54.0,
    }
    assert decision.placement is not None
    assert (decision.placement.node, decision.placement.gpu_indices) == ("B", (0,))


def test_fgd_on_node_a_takes_gpu_0_lowest_index_among_ties() -> None:
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000)])
    with_free(snapshot, "A", [1000, 1000, 300, 0])
    decision = fgd(T).schedule_one(share(500, 4000), snapshot)
    assert decision.placement is not None
    assert decision.placement.gpu_indices == (0,)
    assert decision.scores[0].scores.tolist() == [41.0]


def test_no_access_and_gpu_tie_example() -> None:
    mix = WorkloadMix(
        [
            (TaskType(12000, 1000, 1), 0.5),
            (TaskType(2000, 250, 1, frozenset({"V100M32"})), 0.25),
            (TaskType(2000, 150, 1), 0.25),
        ]
    )
    snapshot = ClusterSnapshot([node("t4", "T4", 2, 10_000)])
    with_free(snapshot, "t4", [1000, 200])
    assert node_fragmentation(snapshot, mix).tolist() == pytest.approx([900])
    # z on GPU 1 -> 800, on GPU 0 -> 787.5: both int(100 * sigmoid(0.1xx)) = 52 -> GPU 0
    for gpu, expected in ((1, 800.0), (0, 787.5)):
        trial = ClusterSnapshot([node("t4", "T4", 2, 10_000)])
        with_free(trial, "t4", [1000, 200])
        trial.assume(
            PodRequest(uid="z", gpu_milli=150, cpu_milli=2000),
            Placement("t4", (gpu,), 150, numa_cpu_milli=(2000,)),
        )
        assert node_fragmentation(trial, mix).tolist() == pytest.approx([expected])
    decision = fgd(mix).schedule_one(share(150, 2000), snapshot)
    assert decision.scores[0].scores.tolist() == [52.0]
    assert decision.placement is not None
    assert decision.placement.gpu_indices == (0,)


def test_score_anchors() -> None:
    # a zero change scores 50, one GPU more fragmentation 26, 0.1 GPU more 47
    assert np.trunc(fragmentation.sigmoid_score(np.array([0.0, -1000.0, -100.0]))).tolist() == [
        50.0,
        26.0,
        47.0,
    ]


def test_whole_and_cpu_only_pods_use_one_hypothetical() -> None:
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000), node("B", "G2", 4, 32_000)])
    with_free(snapshot, "B", [1000, 1000, 1000, 0])
    # 2 whole GPUs (8000 CPU). A: F 800 -> 400 (c only), +400 -> 59. B: F 600 -> 500 (b loses its
    # second full GPU: 0.3 * 1000, c: 0.2 * 1000), +100 -> 52.
    decision = fgd(T).schedule_one(make_pod("w").gpus(2).cpu(8000).memory(0).build(), snapshot)
    assert decision.scores[0].scores.tolist() == [59.0, 52.0]
    assert decision.placement is not None
    assert (decision.placement.node, decision.placement.gpu_indices) == ("A", (0, 1))


def test_cpu_only_pods_avoid_stranding_idle_gpus() -> None:
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000), node("B", "G2", 4, 32_000)])
    with_free(snapshot, "B", [0, 0, 0, 0])
    # 26000 CPU on A leaves 6000: b becomes CPU-short, F 800 -> 2000, -1200 -> 23; B has no idle: 50
    decision = fgd(T).schedule_one(make_pod("c").cpu(26_000).memory(0).build(), snapshot)
    assert decision.scores[0].scores.tolist() == [23.0, 50.0]
    assert decision.node == "B"


# --- Workload -----------------------------------------------------------------------------------


def test_typical_mix_keeps_top_types_covering_the_popularity() -> None:
    pods = (
        [TaskType(1000, 500, 1)] * 50
        + [TaskType(2000)] * 30
        + [TaskType(3000, 1000, 2)] * 15
        + [TaskType(4000, 300, 1)] * 5
    )
    kept = typical_mix(pods, popularity=0.95)
    assert [(t, w) for t, w in kept] == [
        (TaskType(1000, 500, 1), 50.0),
        (TaskType(2000), 30.0),
        (TaskType(3000, 1000, 2), 15.0),
    ]
    assert len(typical_mix(pods, popularity=1.0)) == 4
    # equal counts: larger CPU first
    tie = typical_mix([TaskType(1000)] * 2 + [TaskType(5000)] * 2, popularity=0.5)
    assert tie == [(TaskType(5000), 2.0)]


def test_workload_args_round_trip_and_validation() -> None:
    plugin = fragmentation.new({"workload": T.to_args()})
    assert plugin.mix.types == T.types
    assert plugin.mix.probabilities == pytest.approx(T.probabilities)
    with pytest.raises(ProfileError, match="unknown argument"):
        fragmentation.new({"workload": [{"cpu": 1}]})
    with pytest.raises(ProfileError, match="several GPUs"):
        fragmentation.new({"workload": [{"gpus": 2, "gpuMilli": 500}]})
    with pytest.raises(ProfileError, match="unknown argument"):
        fragmentation.new({"workLoad": []})


def test_cached_scores_match_a_fresh_computation() -> None:
    rng = np.random.default_rng(0)
    nodes = [
        node(f"n{i}", ("G2", "T4")[i % 2], (8, 2)[i % 2], (96_000, 104_000)[i % 2])
        for i in range(20)
    ]
    mix = WorkloadMix(
        [
            (TaskType(3152, 810, 1), 3),
            (TaskType(12000, 1000, 1), 4),
            (TaskType(16000, 1000, 4), 1),
            (TaskType(8000), 2),
        ]
    )
    shapes = [
        share(810, 3152),
        share(470, 4000),
        make_pod("w").gpus(1).cpu(12000).memory(0).build(),
        make_pod("c").cpu(8000).memory(0).build(),
        make_pod("m").gpus(4).cpu(16000).memory(0).build(),
    ]
    snapshot = ClusterSnapshot(nodes)
    fw = fgd(mix)
    placed = 0
    for _ in range(120):
        placed += fw.schedule_one(shapes[int(rng.integers(len(shapes)))], snapshot).node is not None
    assert placed > 30
    # after all placements, the incremental measure equals a fresh one
    measure = FragmentationMeasure(snapshot, mix)
    assert measure.node_fragmentation(snapshot).tolist() == pytest.approx(
        node_fragmentation(snapshot, mix).tolist()
    )
    # and the plugin's cached scores equal a fresh plugin's, for every shape
    plugin = fragmentation.new({"workload": mix.to_args()})
    cached = next(p for name, p, _ in fw.score if name == "Fragmentation")
    everyone = np.arange(len(snapshot))
    for pod in shapes:
        assert (
            cached.score(CycleState(), pod, snapshot, everyone).tolist()
            == plugin.score(CycleState(), pod, snapshot, everyone).tolist()
        )


def test_set_workload_drops_cached_scores() -> None:
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000)])
    with_free(snapshot, "A", [1000, 1000, 300, 0])
    plugin = fragmentation.new({"workload": T.to_args()})
    pod = share(500, 4000)
    before = plugin.score(CycleState(), pod, snapshot, np.array([0]))
    plugin.set_workload([(TaskType(1000, 200, 1), 1.0)])  # a 200-share fits everywhere
    after = plugin.score(CycleState(), pod, snapshot, np.array([0]))
    assert before.tolist() == [41.0]
    assert after.tolist() != before.tolist()


def test_without_a_workload_the_plugin_learns_the_recent_mix() -> None:
    plugin = fragmentation.new({"recentPods": 10, "refreshEvery": 1})
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000)])
    pod = share(500, 4000)
    plugin.score(CycleState(), pod, snapshot, np.array([0]))
    assert plugin.mix.types == (TaskType(4000, 500, 1),)
    draft = AllocationDraft(node=0)
    assert plugin.reserve(CycleState(), pod, snapshot, draft).is_success
    assert draft.gpu_indices == (0,)


# --- cpuBalance (gpusched) ----------------------------------------------------------------------


def test_cpu_balance_counts_idle_gpu_the_cpu_cannot_feed() -> None:
    mix = WorkloadMix([(TaskType(4000, 500, 1), 1.0)])  # 500 milli-GPU per 4000 CPU: r = 0.125
    snapshot = ClusterSnapshot([node("A", "G2", 4, 16_000), node("B", "G2", 4, 40_000)])
    # A: idle 4000, CPU feeds 16000 * 0.125 = 2000 -> 2000 more; B feeds 5000 >= 4000 -> nothing
    measure = FragmentationMeasure(snapshot, mix, balance=1.0)
    assert measure.node_fragmentation(snapshot).tolist() == pytest.approx([2000, 0])
    assert node_fragmentation(snapshot, mix).tolist() == [0, 0]  # the paper's measure


def test_cpu_balance_keeps_cpu_where_idle_gpus_need_it() -> None:
    mix = WorkloadMix([(TaskType(8000, 1000, 1), 1.0)])  # r = 0.125
    snapshot = ClusterSnapshot([node("poor", "T4", 2, 16_000), node("rich", "T4", 2, 64_000)])
    snapshot.tie_rank[:] = [0, 1]  # ties go to the CPU-poor node
    pod = make_pod("c").cpu(8000).memory(0).build()
    # the paper: both nodes still fit the type after (8000 CPU left on poor): 50 and 50, tie -> poor
    assert fgd(mix).schedule_one(pod, snapshot).node == "poor"
    # cpuBalance: on poor 8000 CPU feed only 1000 of 2000 idle milli -> -1000 -> 26; rich stays 50
    decision = fgd(mix, cpuBalance=1.0).schedule_one(pod, ClusterSnapshot(snapshot.nodes))
    assert decision.scores[0].scores.tolist() == [26.0, 50.0]
    assert decision.node == "rich"


def test_gpusched_profile() -> None:
    profile = load_profile("gpusched")
    assert [s.name for s in profile.enabled("score")] == [
        "GPUTopology",
        "LoadAware",
        "Fragmentation",
    ]
    assert [s.name for s in profile.enabled("filter")] == ["NodeResourcesFit", "GPUTopology"]
    assert [s.name for s in profile.enabled("reserve")] == [
        "GPUTopology",
        "LoadAware",
        "Fragmentation",
        "GPUAllocator",
    ]
    assert profile.plugin_args["Fragmentation"] == {"cpuBalance": 1.0, "hostScarcity": True}


def test_host_scarcity_weighs_types_few_nodes_can_host() -> None:
    big = TaskType(120_000, 1000, 8)  # only a 128-core 8-GPU node can host it
    small = TaskType(12_000, 1000, 1)
    nodes = [node("big", "G3", 8, 128_000)] + [node(f"std{i}", "G2", 8, 96_000) for i in range(3)]
    snapshot = ClusterSnapshot(nodes)
    # 32 GPUs, 8 of them can host `big`: its weight x4; `small` fits everywhere: x1
    measure = FragmentationMeasure(snapshot, WorkloadMix([(big, 0.1), (small, 0.9)]), 0.0, True)
    assert measure.compiled.p.tolist() == pytest.approx([0.4, 0.9])
    # never above the most common type's weight
    capped = FragmentationMeasure(snapshot, WorkloadMix([(big, 0.3), (small, 0.7)]), 0.0, True)
    assert capped.compiled.p.tolist() == pytest.approx([0.7, 0.7])
    # one GPU taken on the big node: `big` no longer fits there, its 7000 idle count at 0.4 (it
    # never fits the 96-core nodes: their whole idle counts, whatever is placed there)
    with_free(snapshot, "big", [0] + [1000] * 7)
    assert measure.node_fragmentation(snapshot).tolist() == pytest.approx(
        [0.4 * 7000, 0.4 * 8000, 0.4 * 8000, 0.4 * 8000]
    )


def test_learned_mix_is_installed_only_when_it_drifts() -> None:
    plugin = fragmentation.new({"recentPods": 100, "refreshEvery": 10, "maxDrift": 0.2})
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000)])
    a, b = share(500, 4000), make_pod("w").gpus(1).cpu(8000).memory(0).build()
    everyone = np.array([0])
    plugin.score(CycleState(), a, snapshot, everyone)
    version = plugin.mix.version
    for _ in range(9):  # the window stays all `a`: no drift, nothing installed
        plugin.score(CycleState(), a, snapshot, everyone)
    assert plugin.mix.version == version
    plugin.score(CycleState(), b, snapshot, everyone)  # a look: 1 in 11 is `b`, drift 0.09
    assert plugin.mix.version == version
    for _ in range(10):  # the next look: 11 of 21 are `b`, drift 0.52 > 0.2
        plugin.score(CycleState(), b, snapshot, everyone)
    assert plugin.mix.version > version
    assert set(plugin.mix.types) == {TaskType(4000, 500, 1), TaskType(8000, 1000, 1)}
    assert fragmentation.drift(plugin.mix, plugin.mix.items()) == 0.0


@settings(max_examples=40, deadline=None)
@given(
    shapes=st.lists(st.sampled_from([(4000, 500), (2000, 0), (8000, 1), (2000, 250)]), max_size=60),
    recent=st.integers(1, 12),
)
def test_learned_mix_is_the_typical_mix_of_the_recent_window(
    shapes: list[tuple[int, int]], recent: int
) -> None:
    """The window's counts are kept as pods come and go; at every look they are the counts of
    exactly the last `recentPods` pods."""
    plugin = fragmentation.new({"recentPods": recent, "refreshEvery": 1, "maxDrift": 0.0})
    snapshot = ClusterSnapshot([node("A", "G2", 4, 32_000)])
    pods = [
        make_pod("w").gpus(1).cpu(cpu).memory(0).build()
        if milli == 1
        else share(milli, cpu)
        if milli
        else make_pod("c").cpu(cpu).memory(0).build()
        for cpu, milli in shapes
    ]
    for k, pod in enumerate(pods):
        plugin.score(CycleState(), pod, snapshot, np.array([0]))
        expected = WorkloadMix(typical_mix(pods[max(0, k + 1 - recent) : k + 1]))
        assert plugin.mix.items() == expected.items()
