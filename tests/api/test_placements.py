import copy
from typing import Any

import pytest

from tests.api.conftest import LLAMA, run_scheduler, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def big(name: str, pods: int, gpus: int = 8) -> dict[str, Any]:
    doc = copy.deepcopy(LLAMA)
    doc["name"] = name
    pod_set = doc["podSets"][0]
    pod_set.update(count=pods, minCount=None)
    pod_set["template"]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    pod_set["template"]["topology"] = {"policy": "best-effort"}
    return doc


def test_pods_show_node_gpus_and_scope(team_a, cluster) -> None:
    assert submit(team_a, LLAMA).status_code == 201
    run_scheduler()
    response = team_a.client.get("/api/v1/workloads/llama-ft/pods")
    assert response.status_code == 200
    pods = response.json()["items"]
    assert len(pods) == 2
    for pod in pods:
        assert pod["phase"] == "Bound"
        assert pod["node"] in {"h100-0", "h100-1"}
        assert len(pod["gpus"]) == 4
        assert all(g["milli"] == 1000 and g["uuid"].startswith("GPU-") for g in pod["gpus"])
        assert pod["topologyScope"] in {"nvlink", "pcie", "numa"}
        assert pod["requests"] == {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}
        assert pod["allocation"] == "bound"
    status = team_a.client.get("/api/v1/workloads/llama-ft/status").json()
    assert status["waiting"] is False and status["position"] is None


def test_placements_explain_the_decision(team_a, cluster) -> None:
    submit(team_a, LLAMA)
    run_scheduler()
    decisions = team_a.client.get("/api/v1/workloads/llama-ft/placements").json()["items"]
    assert len(decisions) == 2
    chosen = decisions[0]
    assert chosen["outcome"] == "Success"
    assert chosen["node"] in {"h100-0", "h100-1"}
    explanation = chosen["explanation"]
    assert explanation["chosen"]["node"] == chosen["node"]
    assert {f["plugin"] for f in explanation["chosen"]["filters"]}
    assert explanation["candidates"][0]["scores"]


def test_pending_status_position_reason_and_summary(team_a, cluster) -> None:
    assert submit(team_a, big("wide", pods=3)).status_code == 201
    assert submit(team_a, big("later", pods=1)).status_code == 201
    before = team_a.client.get("/api/v1/workloads/wide/status").json()
    assert before["waiting"] and before["position"] == 1
    assert before["reason"] in {"WaitingForQuota", "Scheduling"}
    run_scheduler(cycles=2)
    wide = team_a.client.get("/api/v1/workloads/wide/status").json()
    assert wide["waiting"] is True
    assert wide["podsPending"] == 1
    assert wide["position"] == 1
    assert wide["reason"] == "NoFit"
    assert "0/4 nodes are available" in wide["message"]
    assert wide["nodes"] == 4 and wide["feasibleNodes"] == 0
    assert sum(r["nodes"] for r in wide["reasons"]) == 4
    assert wide["lastDecision"]["summary"] in wide["message"]
    later = team_a.client.get("/api/v1/workloads/later/status").json()
    assert later["position"] == 2


def test_estimated_start_from_expected_ends(team_a, cluster) -> None:
    """Nothing has finished yet: the running workload's maximumExecutionTimeSeconds bounds its
    end, and the waiting one is estimated to start then."""
    first = big("first", pods=2)
    first["maximumExecutionTimeSeconds"] = 600
    assert submit(team_a, first).status_code == 201
    run_scheduler()
    assert submit(team_a, big("second", pods=1)).status_code == 201
    run_scheduler()
    status = team_a.client.get("/api/v1/workloads/second/status").json()
    assert status["waiting"] is True
    assert status["estimatedStart"] is not None
