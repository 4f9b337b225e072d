import pytest

from sim.cluster import PRESETS, build_nodes, load_topology, synthetic_pools


def test_pools_become_nodes_with_gfd_labels_and_real_topologies() -> None:
    nodes = build_nodes(synthetic_pools(10, "mixed"))
    assert len(nodes) == 10
    h100 = next(n for n in nodes if n.name.startswith("dgx-h100"))
    assert h100.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100.labels["nvidia.com/gpu.count"] == "8"
    assert h100.topology == load_topology("dgx-h100")
    assert len({n.name for n in nodes}) == 10


def test_mixed_fleet_follows_its_shares() -> None:
    counts: dict[str, int] = {}
    for node in build_nodes(synthetic_pools(100, "mixed")):
        counts[node.labels["gpusched.io/pool"]] = counts.get(node.labels["gpusched.io/pool"], 0) + 1
    assert counts == {
        "dgx-h100": 40,
        "dgx-a100": 30,
        "pcie-8gpu-2socket": 20,
        "pcie-8gpu-nvbridge": 10,
    }


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds(name: str) -> None:
    (node,) = build_nodes(synthetic_pools(1, name))
    assert len(node.gpus) == load_topology(name).gpu_count


def test_unknown_topology_is_named() -> None:
    with pytest.raises(ValueError, match="'dgx-z9'"):
        synthetic_pools(1, "dgx-z9")
