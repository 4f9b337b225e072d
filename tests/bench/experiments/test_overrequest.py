"""The over-request experiment, end to end on a small spec: the simulator, the telemetry worker's
cycle and the scheduling worker on one simulated clock. Request-only scheduling lends nothing;
gpusched lends the idle part of over-requested GPUs to opportunistic sweeps and finishes more GPU
work, without evicting or slowing an online pod."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from bench.experiments import overrequest
from bench.management.commands.experiment import scratch_database
from scheduling.models import Event
from sim.spec import parse_spec

# Two servers held by an almost idle owner, an online service and sweeps that want more than
# is free.
SPEC = {
    "nodePools": [{"name": "a100", "count": 2, "topology": "dgx-a100"}],
    "workload": {
        "seed": 3,
        "tenants": [
            {
                "name": "idle-owner",
                "arrivalsPerHour": 30,
                "durationMinutes": 120,
                "priority": 100,
                "shapes": [{"gpus": 4, "cpuMilli": 8000}],
                "utilization": {"kind": "constant", "mean": 0.05, "jitter": 0.01},
            },
            {
                "name": "inference",
                "arrivalsPerHour": 4,
                "durationMinutes": 60,
                "priority": 200,
                "serviceClass": "online",
                "shapes": [{"gpuMilli": 250, "cpuMilli": 2000, "memoryMiB": 8192}],
                "utilization": {"kind": "constant", "mean": 0.5},
            },
            {
                "name": "sweeps",
                "arrivalsPerHour": 60,
                "durationMinutes": 20,
                "serviceClass": "opportunistic",
                "shapes": [{"gpuMilli": 500, "cpuMilli": 2000, "memoryMiB": 8192}],
                "utilization": {"kind": "constant", "mean": 0.9},
            },
        ],
    },
}


# The database side's window: two hours after a half-hour warm-up, when the idle owner's pods hold
# the servers and only lending serves the sweeps (in the first hour the cluster still has room, and
# request-only finishes as much sweep work). The full 8-hour figures come from `experiment
# overrequest` (docs/benchmarks.md).
HOURS, WARMUP_HOURS = 2.0, 0.5


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_lending_idle_capacity_finishes_more_gpu_work_without_touching_online_pods() -> None:
    spec = parse_spec(SPEC)
    results = {}
    with scratch_database():  # as the command runs it
        for policy in overrequest.POLICIES:
            results[policy] = overrequest.simulate(
                spec, policy, hours=HOURS, warmup_hours=WARMUP_HOURS
            )
            lent = Event.objects.filter(type="pod.bound", payload__reclaimed=True).count()
            assert (lent > 0) == (policy == "gpusched")
            call_command("flush", interactive=False, verbosity=0)
    base, ours = results["request-only"], results["gpusched"]
    assert base.gpu_work_by_tenant.get("sweeps", 0.0) < ours.gpu_work_by_tenant["sweeps"]
    assert ours.gpu_work_per_hour > base.gpu_work_per_hour
    assert ours.online_evictions == 0 and ours.online_slowed == 0
    assert base.opportunistic_evictions == 0  # nothing lent, nothing reclaimed
    assert 0.0 < ours.dcgm_utilization <= 1.0
    assert ours.warning_events == {}
    verdict = overrequest.compare(results, honest_tenant="idle-owner")
    assert verdict["speedup"] > 1.0
    assert set(ours.wait_p95_s) == {"idle-owner", "inference", "sweeps"}


@pytest.mark.django_db(transaction=True)
def test_the_command_prints_the_issue_fields_and_draws_the_plot(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(SPEC))
    out = StringIO()
    plot = tmp_path / "overrequest.png"
    call_command(
        "experiment",
        "overrequest",
        "--spec",
        str(spec),
        "--hours",
        "0.5",
        "--warmup-hours",
        "0.1",
        "--json",
        "--plot",
        str(plot),
        stdout=out,
    )
    doc = json.loads(out.getvalue())
    for key in ("speedup", "online_evictions", "opportunistic_evictions"):
        assert key in doc
    assert set(doc["request-only"]["wait_p95_s"]) >= {"sweeps"}
    assert plot.stat().st_size > 10_000


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_through_the_kubernetes_side_the_same_measures_come_out(tmp_path: Path) -> None:
    """The same experiment with the scheduling cycle's Kubernetes side against the simulated
    Kubernetes (real client, kubelets, dcgm-exporter): the keys the database side reports, and
    reclaim lends there too."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(SPEC))
    out = StringIO()
    call_command(
        "experiment",
        "overrequest",
        "--spec",
        str(spec),
        "--hours",
        "1.0",
        "--warmup-hours",
        "0.25",
        "--side",
        "kubernetes",
        "--json",
        stdout=out,
    )
    doc = json.loads(out.getvalue())
    empty = {
        policy: overrequest.PolicyResult(policy, "", False, 1.0) for policy in overrequest.POLICIES
    }
    assert doc["side"] == "kubernetes"
    assert set(overrequest.compare(empty, honest_tenant="idle-owner")) <= set(doc)
    for policy, result in empty.items():
        assert set(doc[policy]) == set(result.as_json())
    ours = doc["gpusched"]
    assert ours["online_evictions"] == 0 and ours["online_slowed"] == 0
    assert ours["finished_by_tenant"].get("sweeps", 0) > 0
    assert "InvalidSimulationAnnotation" not in ours["warning_events"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--warmup-hours", "5", "--hours", "2"], "--warmup-hours"),
        (["--spec", "no-such-spec"], "--spec"),
        (["--policies", "fifo"], "unknown 'fifo'"),
    ],
)
def test_bad_arguments_are_refused_by_name(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("experiment", "overrequest", *args)
