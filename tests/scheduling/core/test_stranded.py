from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.stranded import Stranded, stranded_gpus
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework


def cluster() -> ClusterSnapshot:
    return ClusterSnapshot(
        [
            make_node("plain").gpus(4).build(),
            make_node("tainted").gpus(4).taint("dedicated").build(),
            make_node("labelled").gpus(2).labels(pool="serve").build(),
            make_node("cordoned").gpus(4).cordon().build(),
        ]
    )


def test_nothing_waiting_strands_nothing() -> None:
    assert stranded_gpus(framework(), cluster(), []) == Stranded(0, 0, 0, 0)


def test_a_node_counts_when_no_waiting_shape_passes_its_filters() -> None:
    shapes = [make_pod("a").gpus(1).build(), make_pod("b").gpus(2).selector(pool="serve").build()]
    # "tainted" tolerated by no shape; "cordoned" is not counted at all.
    assert stranded_gpus(framework(), cluster(), shapes) == Stranded(4, 1, 2, 2)


def test_the_walk_stops_when_every_free_gpu_has_a_shape() -> None:
    shapes = [
        make_pod("a").gpus(1).tolerate("dedicated", operator="Exists").build(),
        make_pod("never-judged").gpus(8).build(),
    ]
    assert stranded_gpus(framework(), cluster(), shapes) == Stranded(0, 0, 2, 1)


def test_at_most_max_shapes_are_judged() -> None:
    shapes = [make_pod("too-big").gpus(8).build(), make_pod("a").gpus(1).build()]
    assert stranded_gpus(framework(), cluster(), shapes, max_shapes=1) == Stranded(10, 3, 2, 1)
