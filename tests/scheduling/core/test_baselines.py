"""The FGD paper's five baselines (reference/fgd-and-baselines.md §4.1-4.5) on small cases."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import AllocationDraft
from scheduling.core.plugins import best_fit, dot_product, gpu_clustering, gpu_packing, random_fit
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import NodeSpec, Placement, PodRequest
from scheduling.profile_files import PROFILE_DIR, load_profile
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework


def node(name: str, gpus: int, cpu: int = 64_000, model: str = "G2") -> NodeSpec:
    return make_node(name).gpus(gpus, model=model).cpu(cpu).memory(256 * 1024).build()


def share(milli: int, cpu: int = 0) -> PodRequest:
    return make_pod(f"s{milli}").share(milli).cpu(cpu).memory(0).build()


def whole(count: int, cpu: int = 0) -> PodRequest:
    return make_pod(f"w{count}").gpus(count).cpu(cpu).memory(0).build()


def cpu_only(cpu: int) -> PodRequest:
    return make_pod(f"c{cpu}").cpu(cpu).memory(0).build()


def occupy(snapshot: ClusterSnapshot, node_name: str, gpu: int, milli: int, cpu: int = 0) -> None:
    """Take `milli` of one GPU (and `cpu`) on a node, as an earlier pod would have."""
    pod = (
        PodRequest(uid=f"o{node_name}{gpu}", gpus=1, cpu_milli=cpu)
        if milli == 1000
        else PodRequest(uid=f"o{node_name}{gpu}", gpu_milli=milli, cpu_milli=cpu)
    )
    snapshot.assume(pod, Placement(node_name, (gpu,), milli, numa_cpu_milli=(cpu,)))


def scores(plugin: object, pod: PodRequest, snapshot: ClusterSnapshot) -> list[float]:
    candidates = np.arange(len(snapshot))
    return plugin.score(CycleState(), pod, snapshot, candidates).tolist()  # type: ignore[attr-defined]


# --- Best-fit §4.5 ------------------------------------------------------------------------------


def test_best_fit_prefers_least_leftover_with_absolute_constants() -> None:
    snapshot = ClusterSnapshot([node("a", 8, cpu=96_000), node("b", 2, cpu=32_000)])
    pod = share(500, cpu=4_000)
    # a: s = (92000/128000)*.5 + (7500/8000)*.5 = 0.359375 + 0.46875 = 0.828125 -> int(17.1875) = 17
    # b: s = (28000/128000)*.5 + (1500/8000)*.5 = 0.109375 + 0.09375 = 0.203125 -> int(79.6875) = 79
    assert scores(best_fit.new(None), pod, snapshot) == [17.0, 79.0]


def test_best_fit_truncates_toward_zero_for_cpu_only_pods() -> None:
    snapshot = ClusterSnapshot([node("a", 1, cpu=1_000)])
    # s = (0/128000)*.5 + (1000/8000)*.5 = 0.0625 -> int(93.75) = 93
    assert scores(best_fit.new(None), cpu_only(1_000), snapshot) == [93.0]


# --- Dot-product §4.2 ---------------------------------------------------------------------------


def test_dot_product_smallest_dot_wins() -> None:
    snapshot = ClusterSnapshot([node("a", 8, cpu=128_000), node("b", 2, cpu=32_000)])
    pod = whole(1, cpu=16_000)
    # a: dot = 1 * 0.125 + 1 * 0.125 = 0.25 -> int(100 * (1 - 0.125)) = 87
    # b: dot = 0.25 * 0.125 + 0.25 * 0.125 = 0.0625 -> int(96.875) = 96
    assert scores(dot_product.new(None), pod, snapshot) == [87.0, 96.0]
    # CPU-only: dot = cpuL * cpu / 128000^2 only
    assert scores(dot_product.new(None), cpu_only(64_000), snapshot) == [75.0, 93.0]


# --- GPU packing §4.4 ---------------------------------------------------------------------------


@pytest.mark.parametrize(("gpus", "expected"), [(8, 25.0), (4, 29.0), (2, 31.0), (1, 32.0)])
def test_gpu_packing_idle_nodes_score_by_size(gpus: int, expected: float) -> None:
    snapshot = ClusterSnapshot([node("a", gpus)])
    assert scores(gpu_packing.new(None), share(300), snapshot) == [expected]
    assert scores(gpu_packing.new(None), whole(1), snapshot) == [expected]


def test_gpu_packing_prefers_fuller_gpus_then_used_nodes() -> None:
    snapshot = ClusterSnapshot([node("a", 4), node("b", 4), node("c", 4)])
    occupy(snapshot, "a", 0, 550)  # GPU 0 has 450 free
    occupy(snapshot, "b", 0, 1000)  # b is used but its other GPUs are fully free
    plugin = gpu_packing.new(None)
    # a: best GPU with room has 450 free -> S = 45 -> 100 - 4 = 96
    # b: one fully free GPU opened -> 49; c: idle -> 29
    assert scores(plugin, share(400), snapshot) == [96.0, 49.0, 29.0]
    # a share bigger than 450 opens a fully free GPU on a (k = 1) -> 49
    assert scores(plugin, share(600), snapshot) == [49.0, 49.0, 29.0]
    # 2 whole GPUs on a used node: max(50 - 2, 33) = 48
    assert scores(plugin, whole(2), snapshot) == [48.0, 48.0, 29.0]
    assert scores(plugin, cpu_only(1000), snapshot) == [0.0, 0.0, 0.0]


# --- GPU clustering §4.3 ------------------------------------------------------------------------


def test_gpu_clustering_tags_and_base() -> None:
    snapshot = ClusterSnapshot([node("a", 8), node("b", 8), node("c", 8), node("d", 2)])
    plugin = gpu_clustering.new(None)
    state = CycleState()
    # a holds a share pod only, b holds a share pod and a 1-GPU pod, c and d hold nothing
    for name, pod, gpu, milli in (
        ("a", share(500), 0, 500),
        ("b", share(500), 0, 500),
        ("b", whole(1), 1, 1000),
    ):
        i = snapshot.index[name]
        assert plugin.reserve(state, pod, snapshot, AllocationDraft(node=i)).is_success
        occupy(snapshot, name, gpu, milli)
    # base b = (25 * (8000 - free)) // 8000: a (500 used) 1, b (1500 used) 4, c 0, d (2000 free) 18
    assert scores(plugin, share(300), snapshot) == [1 + 75, 4 + 50, 25, 18 + 25]
    assert scores(plugin, whole(1), snapshot) == [1, 4 + 50, 25, 18 + 25]
    assert scores(plugin, whole(2), snapshot) == [1, 4, 25, 18 + 25]
    assert scores(plugin, cpu_only(1000), snapshot) == [0, 0, 0, 0]


def test_gpu_clustering_unreserve_forgets_the_tag() -> None:
    snapshot = ClusterSnapshot([node("a", 8)])
    plugin = gpu_clustering.new(None)
    state = CycleState()
    pod = share(500)
    plugin.reserve(state, pod, snapshot, AllocationDraft(node=0))
    assert plugin.tags(snapshot)[0, gpu_clustering.SHARE_TAG] == 1
    plugin.unreserve(state, pod, Placement("a", (0,), 500))
    assert plugin.tags(snapshot)[0].sum() == 0


def test_gpu_clustering_in_a_framework_groups_same_shapes() -> None:
    fw = framework((PROFILE_DIR / "gpu-clustering.yaml").read_text())
    snapshot = ClusterSnapshot([node("a", 8), node("b", 8)])
    snapshot.tie_rank[:] = [1, 0]  # b first on ties
    first = fw.schedule_one(share(500), snapshot)
    assert first.node == "b"
    # a 1-GPU pod avoids the share node (b: 1 + 0) for the idle one (a: 0 + 25)
    assert fw.schedule_one(whole(1), snapshot).node == "a"
    # a second share goes where the shares are (b: 1 + 75, a: 3 + 0)
    assert fw.schedule_one(share(300), snapshot).node == "b"


# --- Random-fit §4.1 ----------------------------------------------------------------------------


def test_random_fit_is_uniform_over_candidates_and_reproducible() -> None:
    snapshot = ClusterSnapshot([node(f"n{i}", 2) for i in range(4)])
    picks = []
    for seed in (1, 1, 2):
        plugin = random_fit.new({"seed": seed})
        picks.append([int(np.argmax(scores(plugin, share(100), snapshot))) for _ in range(40)])
    assert picks[0] == picks[1]
    assert picks[0] != picks[2]
    assert set(picks[0]) == {0, 1, 2, 3}
    one = scores(random_fit.new({"seed": 3}), share(100), snapshot)
    assert sorted(one) == [0.0, 0.0, 0.0, 100.0]


def test_random_fit_picks_a_random_gpu_with_room() -> None:
    snapshot = ClusterSnapshot([node("a", 4)])
    occupy(snapshot, "a", 1, 900)
    plugin = random_fit.new({"seed": 7})
    chosen = set()
    for _ in range(50):
        draft = AllocationDraft(node=0)
        assert plugin.reserve(CycleState(), share(500), snapshot, draft).is_success
        assert draft.gpu_indices is not None
        chosen.add(draft.gpu_indices[0])
    assert chosen == {0, 2, 3}  # GPU 1 has only 100 free


# --- Profiles -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("profile", "scorer"),
    [
        ("random-fit", "RandomFit"),
        ("dot-product", "DotProduct"),
        ("gpu-clustering", "GPUClustering"),
        ("gpu-packing", "GPUPacking"),
        ("best-fit", "BestFit"),
        ("fgd", "Fragmentation"),
    ],
)
def test_paper_profiles_score_with_one_plugin_and_keep_the_fit_filter(
    profile: str, scorer: str
) -> None:
    loaded = load_profile(profile)
    assert [s.name for s in loaded.enabled("score")] == [scorer]
    assert "NodeResourcesFit" in [s.name for s in loaded.enabled("filter")]
    assert [s.name for s in loaded.enabled("reserve")][-1] == "GPUAllocator"


def test_best_share_gpu_is_the_fullest_with_room_for_best_policies() -> None:
    fw = framework((PROFILE_DIR / "best-fit.yaml").read_text())
    snapshot = ClusterSnapshot([node("a", 4)])
    occupy(snapshot, "a", 1, 300)  # 700 free
    occupy(snapshot, "a", 2, 500)  # 500 free
    decision = fw.schedule_one(share(450), snapshot)
    assert decision.placement is not None
    assert decision.placement.gpu_indices == (2,)
