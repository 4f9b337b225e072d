import pytest

from scheduling.core.types import NodeSpec, PodRequest, SharingMode
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import filter_reason, place_all

T4 = make_node("t4").gpus(2, model="T4").cpu(8000).memory(32 * 1024)


@pytest.mark.parametrize(
    ("node", "pod", "reason"),
    [
        (T4.build(), make_pod("p").cpu(8000).build(), ""),
        (T4.build(), make_pod("p").cpu(8001).build(), "Insufficient cpu"),
        (T4.build(), make_pod("p").memory(32 * 1024 + 1).build(), "Insufficient memory"),
        (T4.build(), make_pod("p").gpus(2).build(), ""),
        (T4.build(), make_pod("p").gpus(3).build(), "Insufficient nvidia.com/gpu"),
        (T4.build(), make_pod("p").share(999).build(), ""),
        (
            make_node("ex").gpus(1, sharing=SharingMode.EXCLUSIVE).build(),
            make_pod("p").share(500).build(),
            "Insufficient gpusched.io/gpu-milli",
        ),
        (
            T4.build(),
            make_pod("p").gpus(1).models("H100").build(),
            "node(s) didn't have an allowed GPU model",
        ),
        (T4.build(), make_pod("p").gpus(1).models("H100", "T4").build(), ""),
        (
            make_node("c").cpu(8000).build(),
            make_pod("p").models("H100").build(),
            "",
        ),  # CPU-only pods ignore models
        (
            make_node("s").labels(pool="a").build(),
            make_pod("p").selector(pool="b").build(),
            "node(s) didn't match Pod's node affinity/selector",
        ),
        (make_node("s").labels(pool="a").build(), make_pod("p").selector(pool="a").build(), ""),
        (
            make_node("t").taint("gpu", "reserved").build(),
            make_pod("p").build(),
            "node(s) had untolerated taint",
        ),
        (
            make_node("t").taint("gpu", "reserved").build(),
            make_pod("p").tolerate("gpu", "reserved").build(),
            "",
        ),
        (
            make_node("t").taint("gpu", "reserved").build(),
            make_pod("p").tolerate("gpu", operator="Exists").build(),
            "",
        ),
        (
            make_node("t").taint("gpu", "reserved").build(),
            make_pod("p").tolerate("gpu", "other").build(),
            "node(s) had untolerated taint",
        ),
        (make_node("x").cordon().build(), make_pod("p").build(), "node(s) were unschedulable"),
        (
            make_node("m").mig(("3g.40gb", "1g.10gb")).build(),
            make_pod("p").mig("1g.10gb").build(),
            "",
        ),
        (
            make_node("m").mig(("3g.40gb", "1g.10gb")).build(),
            make_pod("p").mig("1g.10gb", 2).build(),
            "Insufficient nvidia.com/mig-1g.10gb",
        ),
        (
            make_node("m").mig(("3g.40gb",)).build(),
            make_pod("p").mig("2g.20gb").build(),
            "Insufficient nvidia.com/mig-2g.20gb",
        ),
        (
            make_node("m").mig(("3g.40gb",)).build(),
            make_pod("p").gpus(1).build(),
            "Insufficient nvidia.com/gpu",
        ),
    ],
)
def test_fit(node: NodeSpec, pod: PodRequest, reason: str) -> None:
    assert filter_reason(node, pod) == reason


def test_shares_pack_onto_the_fullest_gpu_that_still_fits() -> None:
    node = make_node("t4").gpus(2).build()
    pods = [
        make_pod("a").share(600).build(),
        make_pod("b").share(300).build(),
        make_pod("c").share(500).build(),
    ]
    snapshot, decisions = place_all([node], pods)
    assert [d.placement.gpu_indices for d in decisions if d.placement] == [(0,), (0,), (1,)]
    assert snapshot.gpu_free[0, :2].tolist() == [100, 500]


def test_a_share_never_lands_on_a_gpu_taken_whole() -> None:
    node = make_node("t4").gpus(2).build()
    snapshot, decisions = place_all(
        [node], [make_pod("w").gpus(1).build(), make_pod("s").share(100).build()]
    )
    assert decisions[0].placement and decisions[1].placement
    assert decisions[0].placement.gpu_indices != decisions[1].placement.gpu_indices


def test_mig_slots_pack_onto_the_gpu_with_fewest_free_slots() -> None:
    node = make_node("m").mig(("1g.10gb",) * 3, ("1g.10gb",) * 2).build()
    snapshot, decisions = place_all(
        [node], [make_pod("a").mig("1g.10gb").build(), make_pod("b").mig("1g.10gb").build()]
    )
    assert [d.placement.mig_slots for d in decisions if d.placement] == [((1, 0),), ((1, 1),)]
    assert snapshot.mig_free[0].tolist() == [3]


def test_most_allocated_packs_the_second_pod_next_to_the_first() -> None:
    nodes = [make_node("a").gpus(2).build(), make_node("b").gpus(2).build()]
    _, (first, second) = place_all(
        nodes, [make_pod("x").gpus(1).build(), make_pod("y").gpus(1).build()]
    )
    assert first.node == second.node
