import copy
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Allocation, Workload
from telemetry.models import GpuMinute, PodMinute
from tests.api.conftest import LLAMA, onboard, run_scheduler, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

REQ = "podSets[0].template.resources.requests"


def test_quota_is_the_cluster_queues_and_counts_admitted_work_only(cluster) -> None:
    """One quota story: a tenant created with 16 GPUs of quota shows them as `hard`, and only
    what its admitted workloads hold as `used` (issue 18)."""
    team = onboard(
        "team-a",
        quota={"nvidia.com/gpu": "16"},
        default_requests={"memory": "4Gi"},
        max_per_pod={"nvidia.com/gpu": "8"},
    )
    submit(team, LLAMA)
    doc = team.client.get("/api/v1/quota").json()
    assert doc["queueNames"] == ["team-a"]
    assert doc["hard"] == {"nvidia.com/gpu": "16"}
    assert doc["used"] == {"nvidia.com/gpu": "0"}  # pending holds nothing
    run_scheduler()
    doc = team.client.get("/api/v1/quota").json()
    assert doc["used"] == {"nvidia.com/gpu": "8"}
    (cq,) = doc["clusterQueues"]
    assert cq["name"] == "team-a"
    assert cq["flavors"] == [
        {
            "name": "default-flavor",
            "resources": [
                {
                    "name": "nvidia.com/gpu",
                    "nominalQuota": "16",
                    "borrowingLimit": None,
                    "used": "8",
                    "total": "8",
                    "available": "8",
                }
            ],
        }
    ]
    assert doc["limits"]["maxPerPod"] == {"nvidia.com/gpu": "8"}


def test_quota_is_applied_at_admission(cluster) -> None:
    team = onboard("team-a", quota={"nvidia.com/gpu": "12"})
    assert submit(team, LLAMA).status_code == 201  # 8 of 12
    second = copy.deepcopy(LLAMA)
    second["name"] = "second"
    assert submit(team, second).status_code == 201  # 8 more: 16 > 12, it waits
    run_scheduler()
    states = dict(Workload.objects.values_list("name", "state"))
    assert states == {"llama-ft": "Admitted", "second": "Pending"}
    assert Workload.objects.get(name="second").pending_reason == "WaitingForQuota"
    team.client.post("/api/v1/workloads/llama-ft/cancel")  # cancelled work stops counting
    run_scheduler()
    assert Workload.objects.get(name="second").state == Workload.State.ADMITTED


def test_gpu_shares_count_against_the_gpu_quota(cluster) -> None:
    team = onboard("team-a", quota={"nvidia.com/gpu": "1"})
    doc = copy.deepcopy(LLAMA)
    doc["podSets"][0].update(count=3, minCount=None)
    doc["podSets"][0]["template"] = {
        "resources": {"requests": {"cpu": "1", "gpusched.io/gpu-milli": "400"}}
    }
    assert submit(team, doc).status_code == 201  # 3 x 0.4 = 1.2 GPUs
    run_scheduler()
    workload = Workload.objects.get()
    assert workload.state == Workload.State.PENDING
    assert workload.pending_reason == "ExceedsMaxQuota"


def test_default_requests_and_per_pod_limits(cluster) -> None:
    team = onboard(
        "team-a",
        default_requests={"cpu": "2", "memory": "8Gi"},
        min_per_pod={"cpu": "1"},
        max_per_pod={"nvidia.com/gpu": "2"},
    )
    doc = copy.deepcopy(LLAMA)
    doc["podSets"][0]["template"]["resources"]["requests"] = {"nvidia.com/gpu": "2"}
    created = submit(team, doc)
    assert created.status_code == 201
    requests = created.json()["podSets"][0]["template"]["resources"]["requests"]
    assert requests == {"nvidia.com/gpu": "2", "cpu": "2", "memory": "8Gi"}
    too_big = copy.deepcopy(LLAMA)
    too_big["name"] = "big"
    too_big["podSets"][0]["template"]["resources"]["requests"]["cpu"] = "500m"
    response = submit(team, too_big)
    assert response.status_code == 422
    fields = response.json()["extra"]["fields"]
    assert "maximum per pod (nvidia.com/gpu: 2)" in fields[f"{REQ}.nvidia.com/gpu"][0]
    assert "minimum per pod (cpu: 1)" in fields[f"{REQ}.cpu"][0]


def test_usage_without_telemetry(team_a) -> None:
    doc = team_a.client.get("/api/v1/usage").json()
    assert doc["windowSeconds"] == 3600
    assert doc["usedP95Gpus"] is None and doc["overRequest"] is None
    assert doc["advice"] == [] and doc["series"] == []


def test_usage_held_vs_measured_with_advice(team_a, cluster) -> None:
    """Held and busy by scheduling.selectors.efficiency's definition: per rolled-up minute, over the
    minutes measured (tests/dashboard/test_tenant_numbers.py recomputes it from the raw rows)."""
    submit(team_a, LLAMA)
    run_scheduler()
    now = timezone.now().replace(second=0, microsecond=0)
    Allocation.objects.update(bound_at=now - timedelta(minutes=10))  # held for all five minutes
    for minute in range(1, 6):
        GpuMinute.objects.create(
            minute=now - timedelta(minutes=minute), node="h100-0", gpu_index=0, samples=4
        )
        for pod in ("llama-ft-workers-0", "llama-ft-workers-1"):
            PodMinute.objects.create(
                minute=now - timedelta(minutes=minute),
                namespace="team-a",
                pod=pod,
                samples=4,
                gpus_avg=4,
                used_avg=0.5,
                used_max=0.6,
                used_p95=0.55,
                fb_used_avg=1000,
                fb_used_max=1200,
            )
    doc = team_a.client.get("/api/v1/usage?window=1h").json()
    assert doc["requestedGpus"] == pytest.approx(8.0)  # two pods of 4 GPUs, every minute
    assert doc["usedP95Gpus"] == pytest.approx(1.0)
    assert doc["overRequest"] == pytest.approx(8.0)
    advice = doc["advice"][0]
    assert advice["workload"] == "llama-ft" and advice["pods"] == 2
    assert advice["recommended"] == {"gpusched.io/gpu-milli": "700"}
    assert advice["savingGpus"] > 3
    assert len(doc["series"]) == 5
    assert doc["series"][0]["usedAvgGpus"] == pytest.approx(1.0)
    assert doc["series"][0]["heldGpus"] == pytest.approx(8.0)


@pytest.mark.parametrize("window", ["0h", "8d", "soon", "1w"])
def test_usage_window_is_validated(team_a, window: str) -> None:
    response = team_a.client.get(f"/api/v1/usage?window={window}")
    assert response.status_code == 400
    assert "window" in response.json()["extra"]["fields"]


def test_queues_and_priority_classes(team_a, cluster) -> None:
    submit(team_a, LLAMA)
    queues = team_a.client.get("/api/v1/queues").json()["items"]
    assert queues == [
        {
            "name": "team-a",
            "namespace": "team-a",
            "tenant": "team-a",
            "clusterQueue": "team-a",
            "pendingWorkloads": 1,
            "admittedWorkloads": 0,
            "runningWorkloads": 0,
            "admissionFairSharing": None,
        }
    ]
    assert team_a.client.get("/api/v1/priorityclasses").json() == {"items": [], "nextCursor": None}


def test_flavors_and_free_capacity(team_a, cluster) -> None:
    doc = team_a.client.get("/api/v1/flavors").json()
    assert doc["nodes"] == doc["schedulableNodes"] == 4
    assert [f["name"] for f in doc["items"]] == ["default-flavor"]  # made by createtenant
    assert doc["items"][0]["gpus"] == 19
    flavors = {f["gpuModel"]: f for f in doc["gpuModels"]}
    h100 = flavors["NVIDIA-H100-80GB-HBM3"]
    assert (h100["nodes"], h100["gpus"], h100["gpusFree"], h100["largestFreeBlock"]) == (
        2,
        16,
        16,
        8,
    )
    assert h100["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert flavors["T4"]["sharedMilliFree"] == 2000
    assert flavors["A100"]["migGpus"] == 1
    submit(team_a, LLAMA)
    run_scheduler()
    h100 = {f["gpuModel"]: f for f in team_a.client.get("/api/v1/flavors").json()["gpuModels"]}[
        "NVIDIA-H100-80GB-HBM3"
    ]
    assert h100["gpusFree"] == 8
