"""Kueue compatibility through the REST API: extended resources in templates and quotas,
priorityClassRef, deactivation (spec.active), cohorts and admission fair sharing status."""

from __future__ import annotations

import copy

import pytest
import yaml
from django.utils import timezone

from scheduling import events, services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import Event, Pod, QueueSource, Workload
from tests.api.conftest import LLAMA, onboard, run_scheduler, submit

pytestmark = pytest.mark.django_db


def credits_body(name: str, credits: str) -> dict:
    body = copy.deepcopy(LLAMA)
    body["name"] = name
    body["podSets"][0]["template"]["resources"]["requests"]["example.com/credits"] = credits
    return body


def test_an_extended_resource_is_requested_counted_and_shown(admin, cluster) -> None:
    team = onboard("team-a", quota={"nvidia.com/gpu": "16", "example.com/credits": "100"})
    assert submit(team, credits_body("first", "30")).status_code == 201
    assert submit(team, credits_body("second", "30")).status_code == 201
    run_scheduler()
    # Two pods of 30 credits each: the first workload takes 60 of 100, the second waits.
    assert Workload.objects.get(name="first").state == "Admitted"
    second = Workload.objects.get(name="second")
    assert (second.state, second.pending_reason) == ("Pending", "WaitingForQuota")
    assert "example.com/credits" in second.reason
    pods = team.client.get("/api/v1/workloads/first/pods").json()["items"]
    assert pods[0]["requests"]["example.com/credits"] == "30"
    (cq,) = admin.get("/api/v1/admin/clusterqueues").json()["items"]
    resources = {r["name"]: r for r in cq["flavorsUsage"][0]["resources"]}
    assert (
        resources["example.com/credits"]["total"],
        resources["example.com/credits"]["nominalQuota"],
    ) == ("60", "100")


def test_a_fractional_extended_request_is_refused_naming_the_field(cluster) -> None:
    team = onboard("team-a")
    response = submit(team, credits_body("x", "0.5"))
    assert response.status_code == 422  # well formed, not a whole number of units
    fields = response.json()["extra"]["fields"]
    assert "whole number" in fields["podSets[0].template.resources.requests.example.com/credits"][0]


def _priorities() -> None:
    services.queues_apply(
        config=parse_documents(
            list(
                yaml.safe_load_all(
                    "kind: WorkloadPriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\n"
                    "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\n"
                    "metadata: {name: high}\nvalue: 7"
                )
            )
        )
    )


def test_priority_class_ref_picks_the_kind(cluster) -> None:
    _priorities()
    team = onboard("team-a")
    body = {**copy.deepcopy(LLAMA), "name": "by-ref"}
    body["priorityClassRef"] = {
        "group": "scheduling.k8s.io",
        "kind": "PriorityClass",
        "name": "high",
    }
    doc = submit(team, body).json()
    assert (doc["priority"], doc["priorityClassRef"]["kind"]) == (7, "PriorityClass")
    by_name = submit(team, {**copy.deepcopy(LLAMA), "name": "by-name", "priorityClassName": "high"})
    assert by_name.json()["priority"] == 1000  # WorkloadPriorityClass first, as Kueue's label
    assert by_name.json()["priorityClassRef"] == {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "high",
    }
    bad = {**copy.deepcopy(LLAMA), "name": "bad"}
    bad["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "PriorityClass", "name": "high"}
    assert submit(team, bad).status_code == 422  # across fields: the schema cannot say it
    missing = {**copy.deepcopy(LLAMA), "name": "missing"}
    missing["priorityClassRef"] = {
        "group": "kueue.x-k8s.io",
        "kind": "WorkloadPriorityClass",
        "name": "nope",
    }
    response = submit(team, missing)
    assert response.status_code == 422  # an unknown reference
    assert (
        "unknown WorkloadPriorityClass 'nope'"
        in response.json()["extra"]["fields"]["priorityClassRef"][0]
    )
    kinds = {
        (p["name"], p["kind"]) for p in team.client.get("/api/v1/priorityclasses").json()["items"]
    }
    assert kinds == {("high", "WorkloadPriorityClass"), ("high", "PriorityClass")}


def test_deactivation_through_patch(cluster) -> None:
    team = onboard("team-a", quota={"nvidia.com/gpu": "16"})
    submit(team, LLAMA)
    run_scheduler()
    assert Pod.objects.filter(workload__name="llama-ft", phase="Bound").count() == 2
    response = team.client.patch("/api/v1/workloads/llama-ft", {"active": False}, format="json")
    assert response.status_code == 200 and response.json()["active"] is False
    run_scheduler(2)
    doc = team.client.get("/api/v1/workloads/llama-ft").json()
    assert (doc["status"]["state"], doc["status"]["pendingReason"]) == (
        "Pending",
        "InactiveWorkload",
    )
    assert Pod.objects.filter(workload__name="llama-ft", phase="Pending").count() == 2
    assert (
        team.client.patch(
            "/api/v1/workloads/llama-ft", {"active": "maybe"}, format="json"
        ).status_code
        == 400
    )
    assert (
        team.client.patch("/api/v1/workloads/llama-ft", {"state": "x"}, format="json").status_code
        == 400
    )
    team.client.patch("/api/v1/workloads/llama-ft", {"active": True}, format="json")
    run_scheduler()
    assert Workload.objects.get(name="llama-ft").state == "Admitted"


def test_submitting_an_inactive_workload_holds_it(cluster) -> None:
    team = onboard("team-a", quota={"nvidia.com/gpu": "16"})
    doc = submit(team, {**copy.deepcopy(LLAMA), "active": False}).json()
    assert doc["active"] is False
    run_scheduler()
    assert Workload.objects.get(name="llama-ft").state == "Pending"


def test_cohorts_and_admission_fair_sharing_are_shown(admin, cluster) -> None:
    services.queues_apply(
        config=parse_documents(
            list(
                yaml.safe_load_all(
                    "kind: Cohort\nmetadata: {name: org}\n---\n"
                    "kind: Cohort\nmetadata: {name: lab}\nspec: {parentName: org}\n---\n"
                    "kind: ResourceFlavor\nmetadata: {name: any}\n---\n"
                    "kind: ClusterQueue\nmetadata: {name: shared}\nspec:\n  cohortName: lab\n"
                    "  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}\n"
                    "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n"
                    "    - name: any\n      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]"
                )
            )
        )
    )
    team = onboard("team-a", cluster_queue="shared")
    onboard("team-b", cluster_queue="shared")
    submit(team, LLAMA)
    run_scheduler()
    cohorts = {c["name"]: c for c in admin.get("/api/v1/admin/cohorts").json()["items"]}
    assert cohorts["lab"]["parentName"] == "org" and cohorts["lab"]["clusterQueues"] == ["shared"]
    assert cohorts["org"]["defined"] and cohorts["org"]["resources"][0]["usage"] == "8"
    (cq,) = [
        c for c in admin.get("/api/v1/admin/clusterqueues").json()["items"] if c["name"] == "shared"
    ]
    assert cq["admissionMode"] == "UsageBasedAdmissionFairSharing"
    assert cq["cohortPath"] == ["lab", "org"]
    queues = {q["name"]: q for q in admin.get("/api/v1/admin/localqueues").json()["items"]}
    fair_a, fair_b = (
        queues["team-a"]["admissionFairSharing"],
        queues["team-b"]["admissionFairSharing"],
    )
    # team-a paid the entry penalty of its 8 GPUs: it now ranks behind team-b.
    assert float(fair_a["consumedResources"]["nvidia.com/gpu"]) > 0
    assert (fair_a["rank"], fair_b["rank"]) == (2, 1)
    assert fair_b["consumedResources"] == {}


def test_the_cluster_queues_say_where_the_queues_come_from_and_why_they_are_refused(
    admin,
) -> None:
    assert admin.get("/api/v1/admin/clusterqueues").json()["queueSource"] == {
        "kind": "database",
        "appliedAt": None,
        "error": "",
        "errorSince": None,
        "notes": [],
    }
    now = timezone.now()
    services.queue_source_record(
        kind=QueueSource.Kind.CLUSTER, now=now, applied=True, notes=["LocalQueue a/b left out"]
    )
    services.queue_source_record(
        kind=QueueSource.Kind.CLUSTER, now=now, error="clusterqueues[0] (ClusterQueue x): ..."
    )
    source = admin.get("/api/v1/admin/clusterqueues").json()["queueSource"]
    assert source["kind"] == "cluster" and source["error"].startswith("clusterqueues[0]")
    assert source["appliedAt"] and source["errorSince"]
    assert source["notes"] == ["LocalQueue a/b left out"]


def test_an_admin_turns_consolidation_off_for_a_cluster_queue_and_sees_it(admin) -> None:
    onboard("team-a", quota={"nvidia.com/gpu": "8"})
    url = "/api/v1/admin/clusterqueues/team-a/consolidation"

    def shown() -> str:
        (cq,) = admin.get("/api/v1/admin/clusterqueues").json()["items"]
        return cq["consolidation"]

    assert shown() == "Allowed"
    response = admin.put(url, {"consolidation": "Never"}, format="json")
    assert response.status_code == 200
    assert response.json()["consolidation"] == {"from": "Allowed", "to": "Never"}
    assert shown() == "Never"
    (acted,) = Event.objects.filter(
        type=events.AdminActed.TYPE, payload__action="clusterqueue.consolidation"
    )
    assert acted.payload["target"] == "team-a" and acted.payload["actor"] == "admin"
    assert admin.put(url, {"consolidation": "Sometimes"}, format="json").status_code == 400
    missing = admin.put(url.replace("team-a", "nope"), {"consolidation": "Never"}, format="json")
    assert missing.status_code == 422
    # Mirrored from a cluster, the change belongs there: refused, naming the kubectl command.
    services.queue_source_record(kind=QueueSource.Kind.CLUSTER, now=timezone.now(), applied=True)
    refused = admin.put(url, {"consolidation": "Allowed"}, format="json")
    assert refused.status_code == 409
    assert "kubectl annotate clusterqueue team-a gpusched.io/consolidation=Allowed" in str(
        refused.json()
    )
    assert shown() == "Never"
