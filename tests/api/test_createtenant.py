import json
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from api.authentication import token_digest
from api.models import ApiToken, TenantPolicy
from scheduling.models import ClusterQueue, LocalQueue, ResourceFlavor
from tests.api.conftest import client_for

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_createtenant_json(db: None) -> None:
    doc = json.loads(
        run(
            "createtenant",
            "team-a",
            "--namespace",
            "ml-team",
            "--quota",
            "nvidia.com/gpu=16",
            "--quota",
            "cpu=256",
            "--max-per-pod",
            "nvidia.com/gpu=8",
            "--json",
        )
    )
    assert set(doc) == {"tenant", "token", "queueName"}
    assert (doc["tenant"], doc["queueName"]) == ("team-a", "team-a")
    assert ApiToken.objects.get().digest == token_digest(doc["token"])
    assert client_for(doc["token"]).get("/api/v1/quota").json()["namespace"] == "ml-team"
    lq = LocalQueue.objects.get(namespace="ml-team", name="team-a")
    cq = ClusterQueue.objects.get(name="team-a")
    assert lq.cluster_queue == cq
    group = cq.resource_groups[0]
    assert group["coveredResources"] == ["cpu", "nvidia.com/gpu"]
    quotas = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    assert quotas == {"cpu": 256_000, "nvidia.com/gpu": 16_000}
    assert ResourceFlavor.objects.filter(name="default-flavor").exists()
    policy = TenantPolicy.objects.get()
    assert policy.max_per_pod == {"nvidia.com/gpu": "8"}


def test_createtenant_sharing_a_cluster_queue(db: None) -> None:
    run("createtenant", "team-a", "--json")
    doc = json.loads(
        run("createtenant", "team-b", "--cluster-queue", "team-a", "--queue", "main", "--json")
    )
    assert doc["queueName"] == "main"
    assert LocalQueue.objects.get(namespace="team-b").cluster_queue.name == "team-a"
    assert not ClusterQueue.objects.filter(name="team-b").exists()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--quota", "nvidia.com/gpu"], "expected RESOURCE=QUANTITY"),
        (["--quota", "nvidia.com/gpu=-2"], "must not be negative"),
        (["--quota", "tpu=1"], "not a queue resource"),
        (["--cluster-queue", "nope"], "does not exist"),
    ],
)
def test_createtenant_refuses_bad_options(db: None, args: list[str], words: str) -> None:
    with pytest.raises(CommandError, match=words):
        run("createtenant", "team-a", *args)


def test_createtenant_twice_is_an_error(db: None) -> None:
    run("createtenant", "team-a")
    with pytest.raises(CommandError, match="already exists"):
        run("createtenant", "team-a")


def test_human_output_shows_the_token_once(db: None) -> None:
    out = run("createtenant", "team-a")
    assert "token (shown once): gst_" in out


def test_createapitoken_for_staff(db: None) -> None:
    User.objects.create_user("ops", password="pw", is_staff=True)
    User.objects.create_user("dev", password="pw")
    doc = json.loads(run("createapitoken", "ops", "--json"))
    assert client_for(doc["token"]).get("/api/v1/admin/nodes").status_code == 200
    with pytest.raises(CommandError, match="not staff"):
        run("createapitoken", "dev")
