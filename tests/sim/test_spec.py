import uuid

import pytest

from scheduling.core.types import SharingMode, TopologyPolicy
from sim.cluster import build_nodes
from sim.spec import SPEC_DIR, SpecError, load_spec, parse_spec


@pytest.mark.parametrize("name", sorted(p.stem for p in SPEC_DIR.glob("*.yaml")))
def test_shipped_specs_load(name: str) -> None:
    spec = load_spec(name)
    assert spec.pools and (spec.tenants or spec.philly)


def test_demo_is_sixteen_mixed_servers_with_a_mig_node() -> None:
    spec = load_spec("demo")
    nodes = build_nodes(list(spec.pools))
    assert len(nodes) == 16
    assert {n.labels["gpusched.io/pool"] for n in nodes} >= {
        "h100",
        "a100",
        "a100-mig",
        "l40s",
        "t4",
    }
    mig = [g for n in nodes for g in n.gpus if g.sharing is SharingMode.MIG]
    assert len(mig) == 8 and mig[0].mig_layout == ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")
    vision = next(t for t in spec.tenants if t.name == "vision")
    assert vision.shapes[0].topology_policy is TopologyPolicy.SINGLE_NUMA_NODE


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"nodePools": []}, "at least one pool"),
        ({"nodePools": [{"count": 1, "topology": "dgx-z9"}]}, r"nodePools\[0\].topology 'dgx-z9'"),
        ({"nodePools": [{"count": -1, "topology": "dgx-h100"}]}, r"nodePools\[0\].count"),
        (
            {"nodePools": [{"topology": "dgx-h100", "gpus": 8}]},
            r"nodePools\[0\]: unknown key 'gpus'",
        ),
        ({"nodePools": [{"topology": "dgx-h100", "sharing": "mig"}]}, "migLayout go together"),
        (
            {
                "nodePools": [{"topology": "t4-2gpu"}],
                "workload": {"tenants": [{"name": "a", "shapes": []}]},
            },
            r"tenants\[0\].shapes must list",
        ),
        (
            {
                "nodePools": [{"topology": "t4-2gpu"}],
                "workload": {"tenants": [{"name": "a", "shapes": [{"gpus": 1, "gpuMilli": 10}]}]},
            },
            "one of gpus, gpuMilli or migProfile",
        ),
        (
            {
                "nodePools": [{"topology": "t4-2gpu"}],
                "workload": {
                    "tenants": [{"name": "a", "shapes": [{"gpus": 1}], "utilization": {"mean": 2}}]
                },
            },
            r"tenants\[0\].utilization.mean must be between 0 and 1",
        ),
        (
            {
                "nodePools": [{"topology": "t4-2gpu"}],
                "workload": {
                    "tenants": [{"name": "a", "shapes": [{"gpus": 1, "topology": {"policy": "x"}}]}]
                },
            },
            r"shapes\[0\].topology",
        ),
    ],
)
def test_bad_specs_name_the_offending_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(doc)


def test_unknown_spec_name_lists_the_shipped_ones() -> None:
    with pytest.raises(SpecError, match="shipped: .*demo"):
        load_spec("nope")


BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"


def test_the_topology_spec_spreads_64_servers_over_2_blocks_of_4_racks() -> None:
    nodes = build_nodes(list(load_spec("topology").pools))
    assert len(nodes) == 64 and {len(n.gpus) for n in nodes} == {8}
    racks: dict[tuple[str, str], list[str]] = {}
    for node in nodes:
        racks.setdefault((node.labels[BLOCK], node.labels[RACK]), []).append(node.name)
    assert sorted(racks) == [(b, r) for b in ("b1", "b2") for r in ("r1", "r2", "r3", "r4")]
    assert {len(names) for names in racks.values()} == {8}
    assert racks[("b2", "r3")][0] == "h100-b2-r3-0000"
    assert {n.labels["gpusched.io/pool"] for n in nodes} == {"h100"}
    assert {n.labels["cloud.provider.com/node-group"] for n in nodes} == {"tas-group"}
    # One NVLink domain per rack: GFD's <clusterUUID>.<cliqueId>, shared by the rack's nodes only.
    cliques: dict[tuple[str, str], set[str]] = {}
    for node in nodes:
        rack = (node.labels[BLOCK], node.labels[RACK])
        cliques.setdefault(rack, set()).add(node.labels["nvidia.com/gpu.clique"])
    assert {len(found) for found in cliques.values()} == {1}
    values = [next(iter(found)) for found in cliques.values()]
    assert len(set(values)) == 8
    cluster, _, clique = values[0].rpartition(".")
    assert uuid.UUID(cluster) and clique == "1"


def test_a_pool_without_nvlink_domains_has_no_clique_label() -> None:
    spec = parse_spec(
        {
            "nodePools": [
                {
                    "name": "a",
                    "count": 4,
                    "topology": "t4-2gpu",
                    "domains": {"levels": [{"label": RACK, "count": 2}]},
                }
            ]
        }
    )
    nodes = build_nodes(list(spec.pools))
    assert [(n.name, n.labels[RACK]) for n in nodes] == [
        ("a-1-0000", "1"),
        ("a-1-0001", "1"),
        ("a-2-0000", "2"),
        ("a-2-0001", "2"),
    ]
    assert not any("nvidia.com/gpu.clique" in n.labels for n in nodes)


def _domains(domains: object, count: int = 8) -> dict[str, object]:
    return {"nodePools": [{"name": "p", "count": count, "topology": "t4-2gpu", "domains": domains}]}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (_domains({"levels": []}), r"domains.levels must list at least one level"),
        (_domains({"levels": [{"count": 2}]}), r"domains.levels\[0\].label is required"),
        (_domains({"levels": [{"label": RACK, "count": 0}]}), r"count must be at least 1"),
        (_domains({"levels": [{"label": RACK, "count": 3}]}), "count 8 does not divide into 3"),
        (_domains({"levels": [{"label": RACK, "count": 2, "size": 4}]}), "unknown key 'size'"),
        (
            _domains({"levels": [{"label": RACK, "count": 2}], "nvlink": BLOCK}),
            r"domains.nvlink '.*topology-block' is not one of the levels' labels",
        ),
        (
            _domains({"levels": [{"label": RACK, "count": 2}, {"label": RACK, "count": 2}]}),
            "each label once",
        ),
    ],
)
def test_bad_domains_name_the_offending_key(doc: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_spec(doc)
