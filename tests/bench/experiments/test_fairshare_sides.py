"""The fair-share experiment through the shell on both cluster sides: the same synthetic trace
as the core's test, submitted through the services, admitted and placed by the one cycle, run by
the embedded simulator or the simulated Kubernetes' kubelets, with the queues applied where each
side reads them. Fair sharing must do there what it does in the core."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from bench.experiments import fairshare, fairshare_sides, philly
from scheduling.core.scheduler import Framework
from scheduling.models import ClusterQueue
from scheduling.profile_files import load_profile
from tests.bench.experiments.test_fairshare import START, write_trace


def run(trace: philly.Trace, policy: str, side: str, step_s: float = 300) -> fairshare.PolicyResult:
    return fairshare_sides.simulate(
        trace,
        policy,
        Framework(load_profile("topology")),
        side=side,
        nodes=4,
        step_s=step_s,
        drain_days=1,
    )


# Ten minutes a step, not five: half the cycles (the test's CPU is the product's cycle: the kube
# sync, estimates, admission), and still finer than what is asserted: the light tenant's jobs
# last 600 s and wait about 3,000 s behind the flood under FIFO, the flood's jobs 3,600 s.
FAIRNESS_STEP_S = 600


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("side", ["database", "kubernetes"])
def test_fair_sharing_serves_the_light_tenant_on_either_side(tmp_path, side: str) -> None:
    trace = philly.load_trace(write_trace(tmp_path / "t.csv"), start=START, days=1)
    fifo = run(trace, "fifo", side, step_s=FAIRNESS_STEP_S)
    assert set(ClusterQueue.objects.values_list("name", flat=True)) == {"all"}
    call_command("flush", interactive=False, verbosity=0)
    fair = run(trace, "gpusched", side, step_s=FAIRNESS_STEP_S)
    assert set(ClusterQueue.objects.values_list("name", flat=True)) == {"heavy", "light"}
    for result in (fifo, fair):
        assert result.jobs == result.jobs_started == 105
        assert result.gangs_started == 1 and result.gangs_partially_started == 0
    assert fifo.tenants["light"]["wait_p50_s"] >= 3000  # behind the flood
    assert fair.tenants["light"]["wait_p95_s"] < fifo.tenants["light"]["wait_p95_s"]
    assert fair.preemptions > 0 and fifo.preemptions == 0
    assert fair.jain > fifo.jain


@pytest.mark.django_db(transaction=True)
def test_the_command_runs_the_shell_on_a_scratch_database(tmp_path) -> None:
    out = StringIO()
    call_command(
        "experiment",
        "fairshare",
        "--json",
        *("--trace", str(write_trace(tmp_path / "t.csv"))),
        *("--side", "database", "--days", "1", "--drain-days", "1", "--nodes", "4"),
        *("--step", "300", "--policies", "fifo"),
        stdout=out,
    )
    doc = json.loads(out.getvalue())
    assert doc["side"] == "database"
    assert doc["fifo"]["jobs_started"] == 105


def write_cold_start_trace(path: Path) -> Path:
    """A tenant whose earlier jobs took an hour, then a flood of such jobs at the window's start:
    half of it waits for the first half to end, before anything has finished in the window."""
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for k in range(5):
        at = START - timedelta(days=1, minutes=k)
        rows.append(f"{at:%Y-%m-%d %H:%M:%S},3600,1,3600,team")
    for k in range(64):
        at = START + timedelta(seconds=k)
        rows.append(f"{at:%Y-%m-%d %H:%M:%S},{3600 + 60 * (k % 4)},1,3600,team")
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.django_db(transaction=True)
def test_one_arrival_stream_gets_the_same_estimates_on_either_side(tmp_path) -> None:
    """Nothing has finished in the window when the queue forms: the queue's default run time
    (the median of the tenant's earlier jobs) gives every waiting job an estimated start, and the
    same one on both sides (issue 37)."""
    trace = philly.load_trace(write_cold_start_trace(tmp_path / "t.csv"), start=START, days=1)
    results = {}
    for side in ("database", "kubernetes"):
        results[side] = run(trace, "gpusched", side)
        call_command("flush", interactive=False, verbosity=0)
    database, kubernetes = results["database"], results["kubernetes"]
    assert database.eta_judged == kubernetes.eta_judged == 32  # the flood's second half
    assert database.eta_coverage == kubernetes.eta_coverage == 1.0
    assert database.eta_median_rel_error is not None and database.eta_median_rel_error <= 0.3
    # The Kubernetes side also estimates the jobs it binds at once (their pods are pending in the
    # cluster until then): one step, and not judged (they waited less than 10 minutes).
    assert len(database.first_etas) == 32
    assert {k: kubernetes.first_etas.get(k) for k in database.first_etas} == database.first_etas
