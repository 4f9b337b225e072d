"""The fair-share experiment on a small synthetic Philly-shaped trace: a heavy tenant floods the
cluster, a light one (with the larger share) arrives later; fair sharing with reclaim serves the
light one at once, FIFO makes it wait behind the flood. Gangs are never partially started."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import call_command

from bench.experiments import fairness, fairshare, philly
from scheduling.core.scheduler import Framework
from scheduling.profile_files import load_profile

START = datetime(2017, 10, 2, tzinfo=UTC)


def write_trace(path: Path) -> Path:
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]

    def row(at: timedelta, duration: float, gpus: int, tenant: str) -> None:
        stamp = (START + at).strftime("%Y-%m-%d %H:%M:%S")
        rows.append(f"{stamp},{duration},{gpus},{duration * gpus},{tenant}")

    # History before the window gives "light" the larger share of GPU time.
    row(timedelta(days=-30), 1_000_000, 8, "light")
    row(timedelta(days=-30), 200_000, 8, "heavy")
    row(timedelta(days=-1), 3 * 86400, 1, "heavy")  # still running at the start: no history
    for k in range(96):  # the flood: three times the cluster, one GPU each
        row(timedelta(seconds=k), 3600, 1, "heavy")
    for k in range(8):
        row(timedelta(minutes=10, seconds=k), 600, 1, "light")
    row(timedelta(minutes=11), 600, 16, "light")  # a gang of two 8-GPU pods
    path.write_text("\n".join(rows) + "\n")
    return path


def run(trace: philly.Trace, policy: str) -> fairshare.PolicyResult:
    return fairshare.simulate(
        trace, policy, Framework(load_profile("topology")), nodes=4, drain_days=1
    )


def test_fair_sharing_serves_the_light_tenant_and_no_gang_is_split(tmp_path) -> None:
    trace = philly.load_trace(write_trace(tmp_path / "t.csv"), start=START, days=1)
    assert trace.shares["light"] > trace.shares["heavy"]
    fifo, fair = run(trace, "fifo"), run(trace, "gpusched")
    for result in (fifo, fair):
        assert result.jobs == result.jobs_started == 105
        assert result.gangs_started == 1 and result.gangs_partially_started == 0
    assert fair.tenants["light"]["wait_p95_s"] < fifo.tenants["light"]["wait_p95_s"]
    assert fifo.tenants["light"]["wait_p50_s"] >= 3000  # behind the flood
    assert fair.preemptions > 0
    assert fair.jain > fifo.jain


def test_the_history_is_what_finished_before_the_window(tmp_path) -> None:
    """Run times are learnt from the jobs that had finished by the window's start (submission
    plus run time), as a running cluster has learnt them; a job still running then is not
    history, and no job of the window is."""
    trace = philly.load_trace(write_trace(tmp_path / "t.csv"), start=START, days=1)
    assert sorted((j.tenant, j.duration_s) for j in trace.history) == [
        ("heavy", 200_000.0),
        ("light", 1_000_000.0),
    ]
    assert all(j.arrival_s >= 0 for j in trace.jobs) and len(trace.jobs) == 105


def test_nominal_quotas_follow_shares_and_add_up() -> None:
    quotas = philly.nominal_quotas({"a": 0.5, "b": 0.3, "c": 0.2, "d": 0.0}, 7)
    assert quotas == {"a": 4, "b": 2, "c": 1, "d": 0}
    assert sum(philly.nominal_quotas({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3}, 10).values()) == 10


def test_water_filling_and_jain() -> None:
    fair = fairness.water_fill(10, {"a": 2, "b": 20, "c": 20}, {"a": 1, "b": 1, "c": 2})
    assert fair == pytest.approx({"a": 2, "b": 8 / 3, "c": 16 / 3})
    assert fairness.jain([1, 1, 1]) == 1.0
    assert fairness.jain([1, 0]) == 0.5


def test_the_command_reports_json_with_the_criteria(tmp_path) -> None:
    path = write_trace(tmp_path / "t.csv")
    out = StringIO()
    call_command(
        "experiment",
        "fairshare",
        "--json",
        "--trace",
        str(path),
        "--days",
        "1",
        "--nodes",
        "4",
        "--drain-days",
        "1",
        "--policies",
        "fifo,gpusched",
        stdout=out,
    )
    doc = json.loads(out.getvalue())
    for policy in ("fifo", "gpusched"):
        assert {"jain", "worst_tenant_wait_p95_s", "gpu_allocation"} <= set(doc[policy])
        assert doc[policy]["gangs_partially_started"] == 0
        assert 0 <= doc[policy]["gpu_allocation"] <= 1
    assert doc["criteria"]["jain_improved"] and doc["criteria"]["no_partial_gangs"]
