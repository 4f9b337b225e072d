"""A waiting workload's status shows the run time predicted for it, with its basis, and its
estimated start, or why there is none (issue 18); why-pending shows the basis too (issue 37)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.utils import timezone

from dashboard.live import view_for
from scheduling import services
from scheduling.models import Workload
from tests.api.conftest import LLAMA, submit


def test_status_shows_the_prediction_and_the_estimated_start(team_a, cluster) -> None:
    submit(team_a, LLAMA)
    body = team_a.client.get("/api/v1/workloads/llama-ft").json()
    assert body["status"]["runtimePrediction"] is None  # not estimated yet
    assert body["status"]["estimatedStart"] is None
    workload = Workload.objects.get(name="llama-ft")
    now = timezone.now()
    services.workload_estimates_record(
        estimates=[
            services.WorkloadEstimate(
                workload_id=workload.pk,
                runtime_p50_s=600.0,
                runtime_p90_s=1800.0,
                runtime_basis="p50 of 37 similar jobs (tenant team-a, name llama-ft)",
                start_p50=now + timedelta(minutes=10),
                start_p90=now + timedelta(minutes=30),
                start_unknown_reason="",
            )
        ],
        now=now,
    )
    status = team_a.client.get("/api/v1/workloads/llama-ft").json()["status"]
    assert status["runtimePrediction"] == {
        "p50Seconds": 600.0,
        "p90Seconds": 1800.0,
        "basis": "p50 of 37 similar jobs (tenant team-a, name llama-ft)",
    }
    assert status["estimatedStart"]["p50"] and status["estimatedStart"]["p90"]
    assert status["estimatedStart"]["unknownReason"] == ""
    why = team_a.client.get("/api/v1/workloads/llama-ft/status").json()
    assert why["estimatedStartBasis"] == "p50 of 37 similar jobs (tenant team-a, name llama-ft)"


def test_an_unknown_start_says_why(team_a, cluster) -> None:
    submit(team_a, LLAMA)
    workload = Workload.objects.get(name="llama-ft")
    services.workload_estimates_record(
        estimates=[
            services.WorkloadEstimate(
                workload_id=workload.pk,
                runtime_p50_s=None,
                runtime_p90_s=None,
                runtime_basis="no finished workload to predict from yet",
                start_p50=None,
                start_p90=None,
                start_unknown_reason="waits for running work with no predicted end",
            )
        ],
        now=timezone.now(),
    )
    status = team_a.client.get("/api/v1/workloads/llama-ft").json()["status"]
    assert status["runtimePrediction"] is None
    assert status["estimatedStart"] == {
        "p50": None,
        "p90": None,
        "unknownReason": "waits for running work with no predicted end",
    }
    why = team_a.client.get("/api/v1/workloads/llama-ft/status").json()
    assert why["estimatedStart"] is None
    assert why["estimatedStartBasis"] == "waits for running work with no predicted end"


def test_the_dashboard_shows_the_start_and_basis_the_api_shows(team_a, cluster) -> None:
    """One read of the scheduler's estimate (scheduling.selectors.estimates) behind the workload's
    status, its why-pending and the Queues page: the same start and basis in all three."""
    submit(team_a, LLAMA)
    workload = Workload.objects.get(name="llama-ft")
    now = timezone.now().replace(microsecond=0)
    basis = "prior: queue default (gpusched.io/default-runtime of team-a: 3600 s)"
    services.workload_estimates_record(
        estimates=[
            services.WorkloadEstimate(
                workload_id=workload.pk,
                runtime_p50_s=3600.0,
                runtime_p90_s=3600.0,
                runtime_basis=basis,
                start_p50=now + timedelta(minutes=20),
                start_p90=now + timedelta(minutes=50),
                start_unknown_reason="",
            )
        ],
        now=now,
    )
    status = team_a.client.get("/api/v1/workloads/llama-ft").json()["status"]
    why = team_a.client.get("/api/v1/workloads/llama-ft/status").json()
    shown = view_for("queues").sample()["starts"][str(workload.uid)]
    starts = {status["estimatedStart"]["p50"], why["estimatedStart"], shown["start"]}
    assert {datetime.fromisoformat(s.replace("Z", "+00:00")) for s in starts} == {
        now + timedelta(minutes=20)
    }
    assert status["runtimePrediction"]["basis"] == why["estimatedStartBasis"] == shown["basis"]
    assert shown["basis"] == basis
