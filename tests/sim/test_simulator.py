from datetime import timedelta

import pytest
from django.core.management import call_command
from prometheus_client.parser import text_string_to_metric_families

from bench.experiments.worlds import SimClock as Clock
from scheduling.core.scheduler import Framework
from scheduling.models import Gpu, Node, Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from sim.arrivals import GeneratedArrivals
from sim.simulator import Simulator
from sim.spec import load_spec, parse_spec
from telemetry.exposition import render_exposition

pytestmark = pytest.mark.django_db

SPEC = {
    "nodePools": [
        {"name": "h100", "count": 2, "topology": "dgx-h100"},
        {
            "name": "mig",
            "count": 1,
            "topology": "dgx-a100",
            "sharing": "mig",
            "migLayout": ["3g.40gb", "1g.10gb"],
        },
    ],
    "workload": {
        "seed": 2,
        "tenants": [
            {
                "name": "lazy",
                "arrivalsPerHour": 60,
                "durationMinutes": 30,
                "shapes": [{"gpus": 4, "topology": {"policy": "single-numa-node"}}],
                "utilization": {"mean": 0.25, "jitter": 0.0},
            },
            {
                "name": "serving",
                "arrivalsPerHour": 60,
                "durationMinutes": 30,
                "shapes": [{"gpuMilli": 500}, {"migProfile": "1g.10gb"}],
                "utilization": {"mean": 0.8, "jitter": 0.0},
            },
        ],
    },
}


def metrics(simulator: Simulator) -> list[tuple[str, dict[str, str], float]]:
    text = render_exposition(simulator.dcgm_states())
    return [
        (s.name, s.labels, s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def test_workloads_arrive_run_report_metrics_and_finish() -> None:
    clock = Clock()
    simulator = Simulator(parse_spec(SPEC), speed=60.0, clock=clock)
    assert simulator.setup() == 3
    assert simulator.setup() == 3 and Node.objects.count() == 3  # idempotent

    clock.now += timedelta(seconds=60)  # one simulated hour
    report = simulator.run_once()
    assert report.submitted > 50
    database_cycle(Framework(load_profile("topology")), clock=clock).run_once()
    simulator.run_once()
    running = list(Pod.objects.filter(phase="Running").select_related("workload__tenant"))
    assert running

    samples = metrics(simulator)
    util = {
        (s[1]["Hostname"], s[1]["gpu"], s[1].get("pod")): s[2]
        for s in samples
        if s[0] == "DCGM_FI_DEV_GPU_UTIL"
    }
    lazy_pods = {p.name for p in running if p.workload.tenant.name == "lazy"}
    lazy_util = [v for (_, _, pod), v in util.items() if pod in lazy_pods]
    assert lazy_util and all(20 <= v <= 30 for v in lazy_util)  # 4 GPUs asked, a quarter used
    # Every running pod's GPUs carry its labels; idle GPUs carry none.
    labelled = {pod for (_, _, pod) in util if pod}
    whole_or_shared = {p.name for p in running if not p.mig_count}
    assert whole_or_shared <= labelled
    mig = [
        s for s in samples if s[0] == "DCGM_FI_PROF_GR_ENGINE_ACTIVE" and "GPU_I_PROFILE" in s[1]
    ]
    assert len(mig) == 8 * 2  # every MIG instance is reported, held or not
    assert all(s[0] != "DCGM_FI_DEV_GPU_UTIL" or "GPU_I_PROFILE" not in s[1] for s in samples)

    clock.now += timedelta(hours=3)  # long past every duration (30 min simulated = 30 s wall)
    simulator.arrivals.stream = GeneratedArrivals((), seed=0)  # no new arrivals
    finished = simulator.run_once().finished
    assert finished == len(running)
    assert Gpu.objects.filter(used_milli__gt=0).count() == 0
    assert all(not s[1].get("pod") for s in metrics(simulator))
    assert Workload.objects.filter(state="Finished").exists()


def test_simulate_command_runs_one_step() -> None:
    call_command("simulate", "--cluster", "demo", "--once", "--metrics-port", "0")
    assert Node.objects.count() == 16


def test_nodes_carry_their_topology_domains_on_the_database_side() -> None:
    simulator = Simulator(load_spec("topology"), clock=Clock())
    assert simulator.setup() == 64
    labels = Node.objects.get(name="h100-b2-r3-0005").labels
    assert labels["cloud.provider.com/topology-block"] == "b2"
    assert labels["cloud.provider.com/topology-rack"] == "r3"
    rack = [n for n in Node.objects.all() if n.labels["cloud.provider.com/topology-rack"] == "r3"]
    assert len(rack) == 16  # r3 of b1 and r3 of b2: rack values repeat across blocks
    cliques = {n.labels["nvidia.com/gpu.clique"] for n in rack}
    assert len(cliques) == 2
