"""An admin changes a ClusterQueue's nominal quota (scheduling.services.cluster_queue_quota_set):
the next admission cycle uses it, the change and its audit record are one transaction, and a
request naming what the queue does not have is refused per field with nothing written."""

from __future__ import annotations

import json

import pytest
from django.utils import timezone

from scheduling import events, services
from scheduling.models import ClusterQueue, Event, QueueSource
from tests.scheduling import factories
from tests.scheduling.test_queues import apply, queues, states, submit, worker

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

GPU = "nvidia.com/gpu"


def nominal(queue: str, flavor: str = "h100", resource: str = GPU) -> int:
    for group in ClusterQueue.objects.get(name=queue).resource_groups:
        for fq in group["flavors"]:
            for r in fq["resources"]:
                if (fq["name"], r["name"]) == (flavor, resource):
                    return int(r["nominalQuota"])
    raise KeyError((queue, flavor, resource))


def outbox(*types: type[events.EventPayload]) -> list[events.EventPayload]:
    names = [t.TYPE for t in types]
    rows = Event.objects.filter(type__in=names).order_by("id")
    return [events.read(row.type, row.payload) for row in rows]


def test_more_quota_admits_what_waited_and_is_audited() -> None:
    factories.nodes(2)  # 16 GPUs
    queues(("team", 4))
    submit("team", "first")
    submit("team", "second")
    worker().run_once()
    assert states() == {"first": "Admitted", "second": "Pending"}
    before = Event.objects.count()

    detail = services.cluster_queue_quota_set(name="team", nominal={GPU: 8000}, actor="alice")

    assert nominal("team") == 8000
    assert detail == {
        "clusterQueue": "team",
        "flavor": "h100",  # the queue's one flavor, found without being named
        "nominalQuota": {GPU: {"from": "4", "to": "8"}},
    }
    changed, acted = [e for e in outbox(events.QueuesChanged, events.AdminActed)][-2:]
    assert changed == events.QueuesChanged(cluster_queues=["team"])
    assert acted == events.AdminActed(
        actor="alice", action="clusterqueue.quota", target="team", detail=detail
    )
    assert Event.objects.count() == before + 2
    worker().run_once()
    assert states() == {"first": "Admitted", "second": "Admitted"}


def test_less_quota_keeps_what_is_admitted_and_limits_stay() -> None:
    factories.nodes(1)
    apply(
        "kind: ResourceFlavor\nmetadata: {name: h100}\n---\n"
        "kind: ClusterQueue\nmetadata: {name: team}\nspec:\n  cohortName: all\n"
        "  resourceGroups:\n  - coveredResources: [cpu, nvidia.com/gpu]\n    flavors:\n"
        "    - name: h100\n      resources:\n"
        "      - {name: cpu, nominalQuota: 64}\n"
        "      - {name: nvidia.com/gpu, nominalQuota: 8, borrowingLimit: 4, lendingLimit: 2}\n"
        "---\nkind: LocalQueue\nmetadata: {name: default, namespace: team}\n"
        "spec: {clusterQueue: team}"
    )
    submit("team", "running", gpus=4)
    worker().run_once()
    services.cluster_queue_quota_set(name="team", nominal={GPU: 2000}, actor="alice")
    (resource,) = [
        r
        for r in ClusterQueue.objects.get(name="team").resource_groups[0]["flavors"][0]["resources"]
        if r["name"] == GPU
    ]
    assert resource == {
        "name": GPU,
        "nominalQuota": 2000,
        "borrowingLimit": 4000,
        "lendingLimit": 2000,
    }
    assert nominal("team", resource="cpu") == 64000
    assert states() == {"running": "Admitted"}  # as in Kueue: admitted workloads keep theirs
    # Below the lendingLimit is refused (Kueue keeps lendingLimit within nominalQuota).
    with pytest.raises(services.FieldErrors) as refused:
        services.cluster_queue_quota_set(name="team", nominal={GPU: 1000}, actor="alice")
    assert list(refused.value.fields) == [f"quota.{GPU}"]
    assert "lendingLimit 2" in refused.value.fields[f"quota.{GPU}"][0]


def test_the_same_quota_again_writes_nothing() -> None:
    queues(("team", 4))
    before = Event.objects.count()
    detail = services.cluster_queue_quota_set(name="team", nominal={GPU: 4000}, actor="alice")
    assert detail["nominalQuota"] == {} and Event.objects.count() == before


@pytest.mark.parametrize(
    ("request_", "field", "says"),
    [
        ({"name": "nobody", "nominal": {GPU: 1000}}, "clusterQueue", "does not exist"),
        ({"name": "team", "nominal": {GPU: 1000}, "flavor": "a100"}, "flavor", "no flavor 'a100'"),
        ({"name": "team", "nominal": {"cpu": 8000}}, "quota.cpu", "has no quota of cpu"),
        ({"name": "team", "nominal": {GPU: -1000}}, f"quota.{GPU}", "must not be negative"),
    ],
)
def test_what_the_queue_does_not_have_is_named_and_nothing_is_written(
    request_: dict, field: str, says: str
) -> None:
    queues(("team", 4))
    before = Event.objects.count()
    with pytest.raises(services.FieldErrors) as refused:
        services.cluster_queue_quota_set(actor="alice", **request_)
    assert list(refused.value.fields) == [field]
    assert says in refused.value.fields[field][0]
    assert nominal("team") == 4000 and Event.objects.count() == before


def test_several_flavors_need_one_named() -> None:
    apply(
        "kind: ResourceFlavor\nmetadata: {name: h100}\n---\n"
        "kind: ResourceFlavor\nmetadata: {name: a100}\n---\n"
        "kind: ClusterQueue\nmetadata: {name: team}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n"
        "    - {name: h100, resources: [{name: nvidia.com/gpu, nominalQuota: 8}]}\n"
        "    - {name: a100, resources: [{name: nvidia.com/gpu, nominalQuota: 4}]}\n"
    )
    with pytest.raises(services.FieldErrors) as refused:
        services.cluster_queue_quota_set(name="team", nominal={GPU: 1000}, actor="alice")
    assert refused.value.fields == {
        "flavor": ["name one of ClusterQueue 'team''s flavors: a100, h100"]
    }
    services.cluster_queue_quota_set(name="team", nominal={GPU: 6000}, flavor="a100", actor="a")
    assert (nominal("team", "h100"), nominal("team", "a100")) == (8000, 6000)


def test_the_change_and_its_audit_record_commit_together(monkeypatch) -> None:
    queues(("team", 4))
    before = Event.objects.count()

    def audit_fails(**_: object) -> None:
        raise RuntimeError("the outbox write failed")

    monkeypatch.setattr("scheduling.services.queues.admin_action_record", audit_fails)
    with pytest.raises(RuntimeError):
        services.cluster_queue_quota_set(name="team", nominal={GPU: 8000}, actor="alice")
    assert nominal("team") == 4000 and Event.objects.count() == before


def test_refused_while_the_queues_are_mirrored_from_a_cluster() -> None:
    queues(("team", 4))
    services.queue_source_record(kind=QueueSource.Kind.CLUSTER, now=timezone.now(), applied=True)
    with pytest.raises(services.ServiceError, match="change the ClusterQueue there") as refused:
        services.cluster_queue_quota_set(name="team", nominal={GPU: 8000}, actor="alice")
    assert nominal("team") == 4000
    # The refusal gives the kubectl command that makes the change on the cluster's ClusterQueue.
    command = str(refused.value).split("there: ", 1)[1]
    assert command.startswith("kubectl patch clusterqueue team --type=json -p '")
    patch = json.loads(command.split(" -p ", 1)[1].strip("'"))
    at = "/spec/resourceGroups/0/flavors/0/resources/0/nominalQuota"
    assert patch == [{"op": "add", "path": at, "value": "8"}]


def entry(queue: str, flavor: str = "h100") -> dict[str, object]:
    group = ClusterQueue.objects.get(name=queue).resource_groups[0]
    fq = next(f for f in group["flavors"] if f["name"] == flavor)
    return {k: v for k, v in fq["resources"][0].items() if v is not None}


def test_limits_are_set_and_removed_per_flavor_in_one_change() -> None:
    queues(("team", 4))
    key = ("h100", GPU)
    services.cluster_queue_limits_set(
        name="team", limits={key: {"nominalQuota": 6000, "lendingLimit": 2000}}, actor="alice"
    )
    assert entry("team") == {"name": GPU, "nominalQuota": 6000, "lendingLimit": 2000}
    detail = services.cluster_queue_limits_set(
        name="team", limits={key: {"lendingLimit": None}}, actor="alice"
    )
    assert entry("team") == {"name": GPU, "nominalQuota": 6000}
    assert detail["limits"] == {f"h100/{GPU}": {"lendingLimit": {"from": "2", "to": None}}}
    with pytest.raises(services.FieldErrors) as refused:
        services.cluster_queue_limits_set(
            name="team",
            limits={key: {"lendingLimit": 7000}, ("a100", GPU): {"nominalQuota": 1000}},
            actor="alice",
        )
    assert set(refused.value.fields) == {f"h100/{GPU}.lendingLimit", f"a100/{GPU}"}
    assert entry("team") == {"name": GPU, "nominalQuota": 6000}
