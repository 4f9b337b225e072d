"""The topology experiment end to end on a small spec (2 racks of 3 DGX H100 in one block):
with Kueue TAS's required rack, the rack chosen by gpusched's LeastFragmenting, every bound gang is
inside one rack."""

from __future__ import annotations

import pytest

from bench.experiments import topology
from sim.spec import parse_spec

pytestmark = [pytest.mark.django_db]

SPEC = {
    "nodePools": [
        {
            "name": "h100",
            "count": 6,
            "topology": "dgx-h100",
            "domains": {
                "levels": [
                    {"label": topology.BLOCK, "count": 1, "prefix": "b"},
                    {"label": topology.RACK, "count": 2, "prefix": "r"},
                ]
            },
        }
    ],
    "workload": {
        "seed": 5,
        "tenants": [
            {
                "name": "train",
                "arrivalsPerHour": 12,
                "durationMinutes": 30,
                "shapes": [
                    {"weight": 2, "pods": 2, "gpus": 8, "cpuMilli": 64000},
                    {"weight": 1, "pods": 1, "gpus": 4, "cpuMilli": 32000},
                ],
            }
        ],
    },
}


def test_gangs_asking_for_a_rack_are_inside_one_rack() -> None:
    spec = parse_spec(SPEC)
    # gpusched's choice, through the profile's TopologyDomains argument (Kueue's BestFit, the
    # default, is what the other topology tests place with).
    result = topology.simulate(spec, "gpusched", hours=1.5, step_s=120)
    assert result.gangs_bound > 0
    assert result.share_in_one_rack == 1.0
    assert 0 < result.gpu_allocation <= 1
    assert result.gang_wait_p95_s >= result.gang_wait_p50_s >= 0
