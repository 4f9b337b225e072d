import copy

import pytest

from api.models import ApiToken, TenantPolicy
from scheduling import events
from scheduling.models import ClusterQueue, Event, LocalQueue, Node, Pod, Tenant, Workload
from tests.api.conftest import LLAMA, client_for, onboard, run_scheduler, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_create_tenant_returns_a_working_token(admin, cluster) -> None:
    response = admin.post(
        "/api/v1/admin/tenants",
        {"name": "vision", "quota": {"nvidia.com/gpu": "16"}, "maxPerPod": {"cpu": "32"}},
        format="json",
    )
    assert response.status_code == 201, response.json()
    doc = response.json()
    assert doc["queueName"] == "vision"
    assert doc["tenant"]["policy"]["maxPerPod"] == {"cpu": "32"}
    assert "hard" not in doc["tenant"]["policy"]  # the quota is the ClusterQueue's, one story
    cq = ClusterQueue.objects.get(name="vision")
    assert cq.resource_groups[0]["flavors"][0]["resources"][0]["nominalQuota"] == 16000
    assert LocalQueue.objects.get(namespace="vision").cluster_queue == cq
    tenant_client = client_for(doc["token"])
    body = copy.deepcopy(LLAMA)
    body["queueName"] = "vision"
    assert tenant_client.post("/api/v1/workloads", body, format="json").status_code == 201


def test_create_tenant_conflicts_and_validation(admin, team_a) -> None:
    again = admin.post("/api/v1/admin/tenants", {"name": "team-a"}, format="json")
    assert again.status_code == 409
    taken = admin.post(
        "/api/v1/admin/tenants", {"name": "other", "namespace": "team-a"}, format="json"
    )
    assert taken.status_code == 409
    # Breaks the schema (no sign in a count): 400; well formed but no queue resource: 422.
    malformed = admin.post(
        "/api/v1/admin/tenants", {"name": "x", "quota": {"nvidia.com/gpu": "-1"}}, format="json"
    )
    assert malformed.status_code == 400
    assert set(malformed.json()["extra"]["fields"]) == {"quota.nvidia.com/gpu"}
    refused = admin.post(
        "/api/v1/admin/tenants",
        {"name": "x", "quota": {"gpus": "3"}},
        format="json",
    )
    assert refused.status_code == 422
    assert set(refused.json()["extra"]["fields"]) >= {"quota.gpus"}
    assert not Tenant.objects.filter(name="x").exists()


def test_tenant_list_detail_and_policy(admin, team_a, cluster) -> None:
    submit(team_a, LLAMA)
    items = admin.get("/api/v1/admin/tenants").json()["items"]
    assert [(t["name"], t["activeWorkloads"], t["tokens"]) for t in items] == [("team-a", 1, 1)]
    assert admin.get("/api/v1/admin/tenants/nobody").status_code == 404
    response = admin.put(
        "/api/v1/admin/tenants/team-a/policy",
        {"maxPerPod": {"cpu": "4"}},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["policy"]["maxPerPod"] == {"cpu": "4"}
    retired = admin.put(
        "/api/v1/admin/tenants/team-a/policy", {"hard": {"nvidia.com/gpu": "4"}}, format="json"
    )
    assert retired.status_code == 400  # a tenant's quota is its ClusterQueue's
    assert TenantPolicy.objects.get(tenant=team_a.tenant).max_per_pod == {"cpu": "4"}
    bad = admin.put(
        "/api/v1/admin/tenants/team-a/policy",
        {"minPerPod": {"cpu": "8"}, "maxPerPod": {"cpu": "4"}},
        format="json",
    )
    assert bad.status_code == 422  # well formed, refused: min above max
    assert "minPerPod.cpu" in bad.json()["extra"]["fields"]


def test_tokens_issue_list_revoke(admin, team_a) -> None:
    created = admin.post("/api/v1/admin/tenants/team-a/tokens", {"name": "ci"}, format="json")
    assert created.status_code == 201
    token = created.json()["token"]
    assert client_for(token).get("/api/v1/workloads").status_code == 200
    listed = admin.get("/api/v1/admin/tenants/team-a/tokens").json()["items"]
    assert [t["name"] for t in listed] == ["default", "ci"]
    assert all("token" not in t for t in listed)
    revoked = admin.post(f"/api/v1/admin/tokens/{created.json()['id']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["revokedAt"]
    assert client_for(token).get("/api/v1/workloads").status_code == 401
    assert team_a.client.get("/api/v1/workloads").status_code == 200  # the other still works
    assert admin.post("/api/v1/admin/tokens/999999/revoke").status_code == 404
    assert ApiToken.objects.filter(revoked_at__isnull=False).count() == 1


def test_nodes_list_paginates_and_filters(admin, cluster) -> None:
    page = admin.get("/api/v1/admin/nodes?limit=3").json()
    assert [n["name"] for n in page["items"]] == ["h100-0", "h100-1", "mig-0"]
    rest = admin.get(f"/api/v1/admin/nodes?limit=3&cursor={page['nextCursor']}").json()
    assert [n["name"] for n in rest["items"]] == ["t4-0"] and rest["nextCursor"] is None
    t4 = admin.get("/api/v1/admin/nodes?gpuModel=T4").json()["items"]
    assert [n["name"] for n in t4] == ["t4-0"]
    assert t4[0]["gpus"][0]["sharing"] == "time-slicing"
    assert t4[0]["cpu"] == {"allocatable": "64", "used": "0"}
    assert admin.get("/api/v1/admin/nodes/h100-0").json()["gpus"][7]["index"] == 7
    assert admin.get("/api/v1/admin/nodes/nope").status_code == 404


def audited() -> list[tuple[str, str, str, dict]]:
    """The admins' actions in the outbox (AdminActed): who, what, on what, and its detail."""
    records = [
        events.read(row.type, row.payload)
        for row in Event.objects.filter(type=events.AdminActed.TYPE).order_by("id")
    ]
    return [
        (r.actor, r.action, r.target, r.detail) for r in records if isinstance(r, events.AdminActed)
    ]


def test_cordon_and_uncordon(admin, cluster) -> None:
    response = admin.post("/api/v1/admin/nodes/h100-0/cordon")
    assert response.status_code == 200 and response.json()["cordoned"] is True
    assert Node.objects.get(name="h100-0").cordoned
    listed = admin.get("/api/v1/admin/nodes?cordoned=true").json()["items"]
    assert [n["name"] for n in listed] == ["h100-0"]
    assert admin.post("/api/v1/admin/nodes/h100-0/uncordon").json()["cordoned"] is False
    assert audited() == [
        ("admin", "node.cordon", "h100-0", {"cordoned": True}),
        ("admin", "node.uncordon", "h100-0", {"cordoned": False}),
    ]


def test_drain_cordons_and_requeues_what_runs_there(admin, team_a, cluster) -> None:
    submit(team_a, LLAMA)
    run_scheduler()
    node = Pod.objects.filter(workload__name="llama-ft")[0].allocations.get().node.name
    response = admin.post(f"/api/v1/admin/nodes/{node}/drain")
    assert response.status_code == 200
    assert response.json()["node"]["cordoned"] is True
    assert response.json()["evictedWorkloads"] == ["team-a/llama-ft"]
    workload = Workload.objects.get(name="llama-ft")
    assert workload.state == "Pending" and workload.evictions == 1
    assert not Pod.objects.filter(workload=workload).exclude(phase="Pending").exists()
    assert admin.post(f"/api/v1/admin/nodes/{node}/drain").json()["evictedWorkloads"] == []
    assert audited() == [
        ("admin", "node.drain", node, {"evicted": ["team-a/llama-ft"]}),
        ("admin", "node.drain", node, {"evicted": []}),
    ]


def test_queues_for_admins(admin, team_a, team_b, cluster) -> None:
    submit(team_a, LLAMA)
    local = admin.get("/api/v1/admin/localqueues").json()["items"]
    assert [(q["namespace"], q["clusterQueue"], q["pendingWorkloads"]) for q in local] == [
        ("team-a", "team-a", 1),
        ("team-b", "team-b", 0),
    ]
    cluster_queues = admin.get("/api/v1/admin/clusterqueues").json()["items"]
    assert [q["name"] for q in cluster_queues] == ["team-a", "team-b"]
    assert cluster_queues[0]["localQueues"] == ["team-a/team-a"]
    assert cluster_queues[0]["preemption"]["withinClusterQueue"] == "Never"


def test_change_a_tenants_quota(admin, cluster) -> None:
    vision = onboard("vision", quota={"nvidia.com/gpu": "4"})
    response = admin.put(
        "/api/v1/admin/tenants/vision/quota", {"quota": {"nvidia.com/gpu": "12"}}, format="json"
    )
    assert response.status_code == 200, response.json()
    doc = response.json()
    assert doc["changed"] == {
        "clusterQueue": "vision",
        "flavor": "default-flavor",
        "nominalQuota": {"nvidia.com/gpu": {"from": "4", "to": "12"}},
    }
    assert doc["quota"]["hard"] == {"nvidia.com/gpu": "12"}
    # The tenant reads the same quota; the change is audited as the admin's.
    assert vision.client.get("/api/v1/quota").json()["hard"] == {"nvidia.com/gpu": "12"}
    assert audited() == [("admin", "clusterqueue.quota", "vision", doc["changed"])]


def test_a_quota_change_names_each_bad_field(admin, cluster) -> None:
    onboard("vision", quota={"nvidia.com/gpu": "4"})
    before = Event.objects.count()

    def put(body: dict, tenant: str = "vision") -> tuple[int, set[str]]:
        response = admin.put(f"/api/v1/admin/tenants/{tenant}/quota", body, format="json")
        return response.status_code, set(response.json().get("extra", {}).get("fields", {}))

    # Not a number at all, or a sign in a count: the schema's 400.
    assert put({"quota": {"nvidia.com/gpu": "lots"}}) == (400, {"quota.nvidia.com/gpu"})
    assert put({"quota": {"nvidia.com/gpu": "-2"}}) == (400, {"quota.nvidia.com/gpu"})
    assert put({"quota": {}, "colour": "red"})[0] == 400
    # Well formed, but naming what the queue does not have: 422, per field.
    assert put({"quota": {"nvidia.com/gpu": "8"}, "flavor": "h200"}) == (422, {"flavor"})
    assert put({"quota": {"cpu": "8"}}) == (422, {"quota.cpu"})
    assert put({"quota": {"gpus": "8"}}) == (422, {"quota.gpus"})
    assert put({"quota": {}}) == (422, {"quota"})
    assert put({"quota": {"nvidia.com/gpu": "8"}, "clusterQueue": "other"}) == (
        422,
        {"clusterQueue"},
    )
    assert put({"quota": {"nvidia.com/gpu": "8"}}, tenant="nobody")[0] == 404
    cq = ClusterQueue.objects.get(name="vision")
    assert cq.resource_groups[0]["flavors"][0]["resources"][0]["nominalQuota"] == 4000
    assert Event.objects.count() == before  # nothing written, nothing audited
