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
