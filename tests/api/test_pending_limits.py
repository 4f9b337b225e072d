"""A tenant's pending work is bounded (gpusched/settings.py, MAX_PENDING_*): a submit that would
leave more pods waiting for a node, or workloads waiting for admission, than its tenant's or its
queue's limit is refused 403 "exceeded quota" naming the limit and the count, as Kubernetes'
ResourceQuota refuses a pod past `count/pods`, and writes nothing. Small limits here; the defaults
are far above any test or the demo."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.test import override_settings

from scheduling.models import Pod, Workload
from tests.api.conftest import LLAMA, Caller, run_scheduler, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def llama(name: str, count: int = 2, queue: str = "team-a") -> dict[str, Any]:
    doc = copy.deepcopy(LLAMA)
    doc["name"] = name
    doc["queueName"] = queue
    doc["podSets"][0]["count"] = doc["podSets"][0]["minCount"] = count
    return doc


def refused(response: Any, limit: str, *, requested: int, used: int, limited: int) -> None:
    assert response.status_code == 403, response.json()
    doc = response.json()
    assert doc["message"].startswith("exceeded quota: ")
    assert f"requested: {requested}, used: {used}, limited: {limited} ({limit})" in doc["message"]
    assert doc["extra"] == {
        "limit": limit,
        "requested": requested,
        "used": used,
        "limited": limited,
    }


@override_settings(MAX_PENDING_PODS_PER_TENANT=5)
def test_pending_pods_past_the_tenants_limit_are_refused_and_nothing_is_written(
    team_a: Caller, team_b: Caller, cluster
) -> None:
    assert submit(team_a, llama("one")).status_code == 201
    assert submit(team_a, llama("two")).status_code == 201
    response = submit(team_a, llama("three"))
    refused(response, "GPUSCHED_MAX_PENDING_PODS_PER_TENANT", requested=2, used=4, limited=5)
    assert "tenant 'team-a'" in response.json()["message"]
    assert not Workload.objects.filter(name="three").exists()
    assert Pod.objects.filter(workload__tenant=team_a.tenant).count() == 4
    assert submit(team_a, llama("three", count=1)).status_code == 201  # 5: at the limit
    # Another tenant's pending pods are its own.
    assert submit(team_b, llama("one", queue="team-b")).status_code == 201


@override_settings(MAX_PENDING_PODS_PER_QUEUE=3)
def test_pending_pods_past_the_queues_limit_are_refused(team_a: Caller, cluster) -> None:
    assert submit(team_a, llama("one")).status_code == 201
    response = submit(team_a, llama("two"))
    refused(response, "GPUSCHED_MAX_PENDING_PODS_PER_QUEUE", requested=2, used=2, limited=3)
    assert "queue 'team-a'" in response.json()["message"]


@override_settings(MAX_PENDING_WORKLOADS_PER_TENANT=2, MAX_PENDING_WORKLOADS_PER_QUEUE=2)
def test_pending_workloads_past_the_limit_are_refused(team_a: Caller, cluster) -> None:
    for name in ("one", "two"):
        assert submit(team_a, llama(name, count=1)).status_code == 201
    refused(
        submit(team_a, llama("three", count=1)),
        "GPUSCHED_MAX_PENDING_WORKLOADS_PER_TENANT",
        requested=1,
        used=2,
        limited=2,
    )


@override_settings(MAX_PENDING_PODS_PER_TENANT=2)
def test_pods_placed_on_nodes_no_longer_count_as_pending(team_a: Caller, cluster) -> None:
    assert submit(team_a, llama("one")).status_code == 201
    assert submit(team_a, llama("two")).status_code == 403
    run_scheduler()
    assert not Pod.objects.filter(workload__name="one", phase=Pod.Phase.PENDING).exists()
    assert submit(team_a, llama("two")).status_code == 201


@override_settings(MAX_PODS_PER_WORKLOAD=3)
def test_one_submit_asks_for_at_most_the_per_workload_pods(team_a: Caller, cluster) -> None:
    response = submit(team_a, llama("big", count=4))
    assert response.status_code == 422, response.json()
    (message,) = response.json()["extra"]["fields"]["podSets"]
    assert message == "4 pods in one workload; at most 3 (GPUSCHED_MAX_PODS_PER_WORKLOAD)"
    assert not Workload.objects.filter(name="big").exists()
