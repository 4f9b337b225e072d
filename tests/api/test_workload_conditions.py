"""Kueue-shaped workload status through the REST API (issue 18): every condition transition
(pending, admitted, pods ready, finished, cancelled before and after admission, preempted,
pods-ready timeout and its backoff, deactivated), status.admission.podSetAssignments, DELETE,
/status with the ClusterQueue and the positions in the LocalQueue and the ClusterQueue.

Every workload document read here is held to the rules of Kueue's Workload CRD
(tests/api/kueue_crd_rules.py), the transition rules against the document read before it: so
each condition transition these tests walk through is checked."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from bench.experiments.worlds import SimClock as Clock
from scheduling import services
from scheduling.core.queueing.config import LocalQueue, QueueConfig
from scheduling.core.queueing.pods_ready import WaitForPodsReady
from scheduling.core.scheduler import Framework
from scheduling.models import Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.api import kueue_crd_rules
from tests.api.conftest import LLAMA, Caller, onboard, run_scheduler, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def quota_16(db: None) -> Caller:
    return onboard("team-a", quota={"nvidia.com/gpu": "16"})


def body(name: str, gpus: int = 4, count: int = 2) -> dict[str, Any]:
    doc = copy.deepcopy(LLAMA)
    doc["name"] = name
    doc["podSets"][0]["count"] = count
    doc["podSets"][0]["minCount"] = count
    doc["podSets"][0]["template"]["resources"]["requests"]["nvidia.com/gpu"] = str(gpus)
    return doc


_LAST_READ: dict[str, dict[str, Any]] = {}  # workload name -> its document last read


@pytest.fixture(autouse=True)
def _fresh_history() -> None:
    _LAST_READ.clear()


def checked(doc: dict[str, Any]) -> dict[str, Any]:
    """The document, once it keeps Kueue's Workload CRD rules (as an update of the last read)."""
    broken = kueue_crd_rules.violations(doc, _LAST_READ.get(doc["name"]))
    assert not broken, (doc["status"], broken)
    _LAST_READ[doc["name"]] = doc
    return doc


def conditions(caller: Caller, name: str) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status_of(caller, name)["conditions"]}


def status_of(caller: Caller, name: str) -> dict[str, Any]:
    response = caller.client.get(f"/api/v1/workloads/{name}")
    assert response.status_code == 200, response.json()
    return checked(response.json())["status"]


def test_pending_then_admitted_then_pods_ready_then_finished(quota_16, cluster) -> None:
    assert submit(quota_16, body("job")).status_code == 201
    c = conditions(quota_16, "job")
    assert c["QuotaReserved"]["status"] == "False" and c["Admitted"]["status"] == "False"
    assert c["Admitted"]["reason"] == "NoReservation"
    assert "Finished" not in c and "PodsReady" not in c and "Evicted" not in c

    run_scheduler()
    status = status_of(quota_16, "job")
    c = {x["type"]: x for x in status["conditions"]}
    assert c["QuotaReserved"]["status"] == "True" and c["Admitted"]["status"] == "True"
    assert c["PodsReady"]["status"] == "False" and c["PodsReady"]["reason"] == "PodsNotReady"
    assert status["admission"] == {
        "clusterQueue": "team-a",
        "podSetAssignments": [
            {
                "name": "workers",
                "flavors": {"nvidia.com/gpu": "default-flavor"},
                "resourceUsage": {"cpu": "16", "memory": "128Gi", "nvidia.com/gpu": "8"},
                "count": 2,
            }
        ],
    }
    pending = quota_16.client.get("/api/v1/workloads/job/status").json()
    assert pending["clusterQueue"] == "team-a" and pending["positionInLocalQueue"] is None

    pods = list(Pod.objects.filter(workload__name="job"))
    services.pods_start(pods=pods, now=timezone.now())
    c = conditions(quota_16, "job")
    assert c["PodsReady"]["status"] == "True" and c["PodsReady"]["reason"] == "PodsReady"
    running = quota_16.client.get("/api/v1/workloads/job/status").json()
    assert running["clusterQueue"] == "team-a" and running["waiting"] is False

    services.pods_finish(pods=pods, now=timezone.now())
    status = status_of(quota_16, "job")
    c = {x["type"]: x for x in status["conditions"]}
    assert c["Finished"]["status"] == "True" and c["Finished"]["reason"] == "Succeeded"
    assert c["QuotaReserved"]["status"] == "True"  # it held quota until it ended, as Kueue keeps
    assert "PodsReady" not in c
    assert status["pendingReason"] == "" and status["reason"] == ""


def test_cancelled_before_admission_never_reports_quota_reserved(quota_16, cluster) -> None:
    submit(quota_16, body("too-big", gpus=8, count=3))  # 24 GPUs > 16: never admitted
    run_scheduler()
    assert Workload.objects.get(name="too-big").pending_reason
    response = quota_16.client.post("/api/v1/workloads/too-big/cancel")
    assert response.status_code == 200
    status = checked(response.json())["status"]
    c = {x["type"]: x for x in status["conditions"]}
    assert c["QuotaReserved"]["status"] == "False" and c["Admitted"]["status"] == "False"
    assert c["QuotaReserved"]["reason"] == "NoReservation"
    assert c["Finished"]["reason"] == "Cancelled" and c["Finished"]["message"] == "cancelled"
    assert status["pendingReason"] == "" and status["admission"] is None


def test_cancelled_after_admission_keeps_what_it_had(quota_16, cluster) -> None:
    submit(quota_16, body("job"))
    run_scheduler()
    status_of(quota_16, "job")
    status = checked(quota_16.client.post("/api/v1/workloads/job/cancel").json())["status"]
    c = {x["type"]: x for x in status["conditions"]}
    assert c["QuotaReserved"]["status"] == "True" and c["Finished"]["reason"] == "Cancelled"
    assert [a["name"] for a in status["admission"]["podSetAssignments"]] == ["workers"]


def test_delete_cancels_the_workload(quota_16, cluster) -> None:
    submit(quota_16, body("job"))
    response = quota_16.client.delete("/api/v1/workloads/job")
    assert response.status_code == 200
    assert response.json()["status"]["state"] == "Cancelled"
    assert Workload.objects.get(name="job").state == Workload.State.CANCELLED
    assert quota_16.client.delete("/api/v1/workloads/job").status_code == 409
    assert quota_16.client.delete("/api/v1/workloads/nope").status_code == 404


def test_preempted_is_evicted_and_requeued_then_admitted_again(quota_16, cluster) -> None:
    submit(quota_16, body("job"))
    run_scheduler()
    workload = Workload.objects.get(name="job")
    services.workloads_evict(
        workloads=[workload], reason="Preempted to admit someone", now=timezone.now()
    )
    status = status_of(quota_16, "job")
    c = {x["type"]: x for x in status["conditions"]}
    assert c["Evicted"]["status"] == "True" and c["Evicted"]["reason"] == "Preempted"
    assert c["Requeued"]["status"] == "True" and c["Requeued"]["reason"] == "Preempted"
    assert c["QuotaReserved"]["status"] == "False" and status["evictions"] == 1
    run_scheduler()
    c = conditions(quota_16, "job")
    assert c["QuotaReserved"]["status"] == "True"
    assert c["Evicted"]["status"] == "False" and c["Evicted"]["reason"] == "QuotaReserved"


def test_pods_ready_timeout_is_evicted_backs_off_and_is_requeued(quota_16, cluster) -> None:
    """16 GPUs of quota, one of the two 8-GPU H100 nodes cordoned: a 2 x 8-GPU gang is admitted
    and cannot be placed; after the timeout it is evicted, then backs off, then is requeued."""
    clock = Clock()
    worker = database_cycle(
        Framework(load_profile("topology")),
        identity="api-tests",
        clock=clock,
        pods_ready=WaitForPodsReady(timeout_s=300, backoff_base_s=60, backoff_max_s=3600),
    )
    services.node_set_cordoned(node=cluster[1], cordoned=True)  # one 8-GPU H100 node left
    stuck = body("stuck", gpus=8, count=2)  # 16 GPUs: quota allows, one node does not
    del stuck["podSets"][0]["template"]["topology"]
    submit(quota_16, stuck)
    worker.run_once()
    assert status_of(quota_16, "stuck")["state"] == "Admitted"
    clock.now += timedelta(seconds=300)
    worker.run_once()
    status = status_of(quota_16, "stuck")
    c = {x["type"]: x for x in status["conditions"]}
    assert status["state"] == "Pending" and status["admission"] is None
    assert c["Evicted"]["status"] == "True" and c["Evicted"]["reason"] == "PodsReadyTimeout"
    assert c["QuotaReserved"]["status"] == "False"
    assert status["requeueState"]["count"] == 1 and status["requeueState"]["requeueAt"]
    # The API reads the wall clock: the backoff (60 s after the cycle's clock) is still running.
    assert c["Requeued"]["status"] == "False" and c["Requeued"]["reason"] == "PodsReadyTimeout"

    Workload.objects.filter(name="stuck").update(requeue_at=timezone.now() - timedelta(seconds=1))
    c = conditions(quota_16, "stuck")
    assert c["Requeued"]["status"] == "True" and c["Requeued"]["reason"] == "BackoffFinished"


def test_deactivated_is_evicted_inactive_and_not_requeued(quota_16, cluster) -> None:
    submit(quota_16, body("job"))
    run_scheduler()
    response = quota_16.client.patch("/api/v1/workloads/job", {"active": False}, format="json")
    assert response.status_code == 200
    run_scheduler()
    c = conditions(quota_16, "job")
    assert c["Evicted"]["status"] == "True" and c["Evicted"]["reason"] == "InactiveWorkload"
    assert c["Requeued"]["status"] == "False" and c["Requeued"]["reason"] == "InactiveWorkload"
    quota_16.client.patch("/api/v1/workloads/job", {"active": True}, format="json")
    c = conditions(quota_16, "job")
    assert c["Requeued"]["status"] == "True"


def test_positions_in_the_local_queue_and_the_cluster_queue(db, cluster) -> None:
    """Two LocalQueues of one tenant share a ClusterQueue: positions in the ClusterQueue run
    across both (the LocalQueue using less goes first: Kueue's usage-aware order), positions in
    each LocalQueue within it, and each queue lists its own."""
    caller = onboard("team-a", quota={"nvidia.com/gpu": "8"})
    services.queues_apply(
        config=QueueConfig(
            local_queues=(LocalQueue(namespace="team-a", name="other", cluster_queue="team-a"),)
        )
    )
    submit(caller, body("running", gpus=4, count=2))  # takes the whole quota
    run_scheduler()
    for name, queue in (("a1", "team-a"), ("b1", "other"), ("a2", "team-a"), ("b2", "other")):
        doc = body(name, gpus=4, count=1)
        doc["queueName"] = queue
        assert submit(caller, doc).status_code == 201, name
    run_scheduler()
    listed = caller.client.get("/api/v1/queues/team-a/pendingworkloads").json()["items"]
    assert [(i["name"], i["positionInLocalQueue"]) for i in listed] == [("a1", 1), ("a2", 2)]
    assert [i["positionInClusterQueue"] for i in listed] == [3, 4]
    other = caller.client.get("/api/v1/queues/other/pendingworkloads").json()["items"]
    assert [(i["name"], i["positionInLocalQueue"], i["positionInClusterQueue"]) for i in other] == [
        ("b1", 1, 1),
        ("b2", 2, 2),
    ]
    status = caller.client.get("/api/v1/workloads/b2/status").json()
    assert (status["positionInClusterQueue"], status["positionInLocalQueue"]) == (2, 2)
    assert status["clusterQueue"] == "team-a"
