import copy
from typing import Any

import pytest

from api.models import IdempotencyKey
from scheduling.models import Pod, Workload
from tests.api.conftest import LLAMA, onboard, run_scheduler, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def body(name: str = "llama-ft", **changes: Any) -> dict[str, Any]:
    doc = copy.deepcopy(LLAMA)
    doc["name"] = name
    doc.update(changes)
    return doc


def test_submit_the_issue_example(team_a, cluster) -> None:
    response = submit(team_a, LLAMA)
    assert response.status_code == 201, response.json()
    doc = response.json()
    assert doc["name"] == "llama-ft"
    assert doc["queueName"] == "team-a"
    assert doc["namespace"] == "team-a"
    assert doc["serviceClass"] == "batch"
    assert doc["status"]["state"] == "Pending"
    assert doc["status"]["pods"]["total"] == 2
    assert doc["status"]["conditions"][0]["type"] == "QuotaReserved"
    assert doc["podSets"][0]["template"]["resources"]["requests"]["nvidia.com/gpu"] == "4"
    pods = list(Pod.objects.filter(workload__name="llama-ft").order_by("name"))
    assert [p.name for p in pods] == ["llama-ft-workers-0", "llama-ft-workers-1"]
    pod = pods[0]
    assert (pod.cpu_milli, pod.memory_mib, pod.gpus) == (8000, 64 * 1024, 4)
    assert pod.constraints.gpu_models == [
        "NVIDIA-H100-80GB-HBM3"
    ]  # "H100" resolved to the node's model
    assert pod.topology_policy == "single-numa-node"
    assert pod.gang_min_count == 2


def test_submit_a_gpu_share_and_a_mig_slice(team_a, cluster) -> None:
    share = body("infer")
    share["podSets"][0]["template"] = {
        "resources": {"requests": {"cpu": "500m", "memory": "2Gi", "gpusched.io/gpu-milli": "500"}}
    }
    assert submit(team_a, share).status_code == 201
    mig = body("notebook")
    mig["podSets"][0]["template"] = {
        "resources": {"requests": {"cpu": "1", "nvidia.com/mig-1g.10gb": "1"}}
    }
    assert submit(team_a, mig).status_code == 201
    shared = Pod.objects.filter(workload__name="infer").first()
    sliced = Pod.objects.filter(workload__name="notebook").first()
    assert shared is not None and sliced is not None
    assert (shared.cpu_milli, shared.memory_mib, shared.gpu_milli, shared.gpus) == (
        500,
        2048,
        500,
        0,
    )
    assert (sliced.mig_profile, sliced.mig_count) == ("1g.10gb", 1)


def test_queue_name_defaults_to_the_tenants_queue(team_a, cluster) -> None:
    doc = body()
    del doc["queueName"]
    response = submit(team_a, doc)
    assert response.status_code == 201
    assert response.json()["queueName"] == "team-a"


def test_retrieve(team_a, cluster) -> None:
    submit(team_a, LLAMA)
    response = team_a.client.get("/api/v1/workloads/llama-ft")
    assert response.status_code == 200
    assert response.json()["name"] == "llama-ft"
    assert team_a.client.get("/api/v1/workloads/nope").status_code == 404


def test_cancel(team_a, cluster) -> None:
    submit(team_a, LLAMA)
    response = team_a.client.post("/api/v1/workloads/llama-ft/cancel")
    assert response.status_code == 200
    assert response.json()["status"]["state"] == "Cancelled"
    assert response.json()["status"]["pods"]["cancelled"] == 2
    again = team_a.client.post("/api/v1/workloads/llama-ft/cancel")
    assert again.status_code == 409
    assert "Cancelled" in again.json()["message"]


def test_name_conflict_is_409(team_a, cluster) -> None:
    assert submit(team_a, LLAMA).status_code == 201
    response = submit(team_a, LLAMA)
    assert response.status_code == 409
    assert response.json()["extra"] == {"field": "name"}
    assert Workload.objects.count() == 1


def test_same_name_in_two_tenants_is_fine(team_a, team_b, cluster) -> None:
    assert submit(team_a, LLAMA).status_code == 201
    assert submit(team_b, body(queueName="team-b")).status_code == 201


def test_idempotent_submit(team_a, cluster) -> None:
    first = submit(team_a, LLAMA, HTTP_IDEMPOTENCY_KEY="k-1")
    again = submit(team_a, LLAMA, HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["uid"] == again.json()["uid"]
    assert Workload.objects.count() == 1
    other = submit(team_a, body("other"), HTTP_IDEMPOTENCY_KEY="k-1")
    assert other.status_code == 422
    assert other.json()["extra"] == {"header": "Idempotency-Key"}
    assert IdempotencyKey.objects.count() == 1


def test_failed_submit_leaves_no_idempotency_key(team_a, cluster) -> None:
    bad = body(queueName="nope")
    assert submit(team_a, bad, HTTP_IDEMPOTENCY_KEY="k-2").status_code == 422
    assert not IdempotencyKey.objects.exists()
    assert submit(team_a, LLAMA, HTTP_IDEMPOTENCY_KEY="k-2").status_code == 201


# --- list ---------------------------------------------------------------------------------------


def _names(response: Any) -> list[str]:
    return [item["name"] for item in response.json()["items"]]


def test_list_newest_first_with_cursor_pagination(team_a, cluster) -> None:
    for k in range(5):
        assert submit(team_a, body(f"job-{k}")).status_code == 201
    page1 = team_a.client.get("/api/v1/workloads?limit=2")
    assert page1.status_code == 200
    assert _names(page1) == ["job-4", "job-3"]
    cursor = page1.json()["nextCursor"]
    page2 = team_a.client.get(f"/api/v1/workloads?limit=2&cursor={cursor}")
    assert _names(page2) == ["job-2", "job-1"]
    page3 = team_a.client.get(f"/api/v1/workloads?limit=2&cursor={page2.json()['nextCursor']}")
    assert _names(page3) == ["job-0"]
    assert page3.json()["nextCursor"] is None


def test_list_filters(team_a, cluster) -> None:
    submit(team_a, body("train-1", serviceClass="batch"))
    submit(team_a, body("serve-1", serviceClass="online"))
    team_a.client.post("/api/v1/workloads/train-1/cancel")
    get = team_a.client.get
    assert _names(get("/api/v1/workloads?serviceClass=online")) == ["serve-1"]
    assert _names(get("/api/v1/workloads?state=Cancelled")) == ["train-1"]
    assert _names(get("/api/v1/workloads?state=Pending,Cancelled")) == ["serve-1", "train-1"]
    assert _names(get("/api/v1/workloads?namePrefix=tra")) == ["train-1"]
    assert _names(get("/api/v1/workloads?queueName=other")) == []
    assert _names(get("/api/v1/workloads?createdAfter=2999-01-01T00:00:00Z")) == []


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("state=Sleeping", "state"),
        ("limit=0", "limit"),
        ("limit=100000", "limit"),
        ("cursor=%%%", "cursor"),
        ("cursor=bm90LWFuLWludA", "cursor"),
        ("serviceClass=gold", "serviceClass"),
        ("createdAfter=yesterday", "createdAfter"),
        ("color=blue", "color"),
    ],
)
def test_list_rejects_bad_parameters(team_a, query: str, field: str) -> None:
    response = team_a.client.get(f"/api/v1/workloads?{query}")
    assert response.status_code == 400
    assert field in response.json()["extra"]["fields"]


# --- isolation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/v1/workloads/llama-ft"),
        ("post", "/api/v1/workloads/llama-ft/cancel"),
        ("get", "/api/v1/workloads/llama-ft/pods"),
        ("get", "/api/v1/workloads/llama-ft/placements"),
        ("get", "/api/v1/workloads/llama-ft/status"),
    ],
)
def test_another_tenants_workload_is_404_like_a_missing_one(
    team_a, team_b, cluster, method: str, path: str
) -> None:
    assert submit(team_a, LLAMA).status_code == 201
    theirs = getattr(team_b.client, method)(path)
    missing = getattr(team_b.client, method)(path.replace("llama-ft", "no-such-workload"))
    assert theirs.status_code == missing.status_code == 404
    assert theirs.json()["message"] == missing.json()["message"].replace(
        "no-such-workload", "llama-ft"
    )
    assert Workload.objects.get(name="llama-ft").state == "Pending"  # B's cancel did nothing


def test_lists_and_quota_show_only_ones_own(cluster) -> None:
    team_a = onboard("team-a", quota={"nvidia.com/gpu": "16"})
    team_b = onboard("team-b", quota={"nvidia.com/gpu": "16"})
    submit(team_a, LLAMA)
    run_scheduler()
    assert team_b.client.get("/api/v1/workloads").json()["items"] == []
    assert team_b.client.get("/api/v1/workloads?namePrefix=llama").json()["items"] == []
    assert team_b.client.get("/api/v1/quota").json()["used"]["nvidia.com/gpu"] == "0"
    assert team_a.client.get("/api/v1/quota").json()["used"]["nvidia.com/gpu"] == "8"
    queues = team_b.client.get("/api/v1/queues").json()["items"]
    assert [q["namespace"] for q in queues] == ["team-b"]
