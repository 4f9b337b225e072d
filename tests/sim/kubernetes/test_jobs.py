"""batch/v1 Jobs through the official client (BatchV1Api): the Job controller creates, counts and
deletes pods as Kubernetes' does (parallelism, completions, Indexed, suspend, backoffLimit,
activeDeadlineSeconds) while a scheduler binds them and the simulated kubelets run them."""

from __future__ import annotations

from kubernetes import client, watch

from sim.kubernetes.launch import SimulatedCluster
from tests.sim.kubernetes.helpers import Clock, client_for
from tests.sim.kubernetes.jobs import (
    NAMESPACE,
    batch,
    bind_all,
    conditions,
    events,
    fail,
    job,
    pods_of,
)

TRACKING = "batch.kubernetes.io/job-tracking"
INDEX = "batch.kubernetes.io/job-completion-index"


def test_a_job_runs_its_completions_parallelism_at_a_time(
    sim: SimulatedCluster, clock: Clock
) -> None:
    core = client_for(client.CoreV1Api, sim.kube)
    since = core.list_namespaced_pod(NAMESPACE).metadata.resource_version
    created = batch(sim).create_namespaced_job(
        NAMESPACE, job("train", parallelism=2, completions=3)
    )
    uid = created.metadata.uid
    assert created.spec.backoff_limit == 6 and created.spec.completion_mode == "NonIndexed"
    assert created.spec.suspend is False and created.spec.manual_selector is False
    assert created.spec.pod_replacement_policy == "TerminatingOrFailed"
    assert created.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    assert created.spec.template.metadata.labels == {
        "job-name": "train",
        "batch.kubernetes.io/job-name": "train",
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
    }

    # The pods, as a watch on them sees them arrive.
    stream = watch.Watch().stream(
        core.list_namespaced_pod,
        NAMESPACE,
        label_selector=f"batch.kubernetes.io/controller-uid={uid}",
        resource_version=since,
        timeout_seconds=1,
    )
    added = [e["object"] for e in stream if e["type"] == "ADDED"]
    assert len(added) == 2
    for pod in added:
        assert pod.metadata.name.startswith("train-") and len(pod.metadata.name) == 11
        (owner,) = pod.metadata.owner_references
        assert (owner.api_version, owner.kind, owner.name, owner.uid) == (
            "batch/v1",
            "Job",
            "train",
            uid,
        )
        assert owner.controller and owner.block_owner_deletion
        assert pod.metadata.labels["job-name"] == "train"
        assert pod.metadata.labels["batch.kubernetes.io/controller-uid"] == uid
        assert pod.metadata.finalizers == [TRACKING]
    status = batch(sim).read_namespaced_job_status("train", NAMESPACE).status
    assert (status.active, status.ready, status.terminating, status.succeeded) == (2, 0, 0, None)
    assert status.start_time is not None and status.conditions is None

    bind_all(sim)
    sim.run_once()  # both start
    assert batch(sim).read_namespaced_job("train", NAMESPACE).status.ready == 2
    clock.advance(601)
    sim.run_once()  # both succeed; the third pod is created
    pods = pods_of(sim, "train")
    assert sorted(p["status"]["phase"] for p in pods) == ["Pending", "Succeeded", "Succeeded"]
    succeeded = [p for p in pods if p["status"]["phase"] == "Succeeded"]
    assert not any(p["metadata"].get("finalizers") for p in succeeded)  # counted, released
    status = batch(sim).read_namespaced_job("train", NAMESPACE).status
    assert (status.active, status.succeeded) == (1, 2)

    bind_all(sim)
    sim.run_once()
    clock.advance(601)
    sim.run_once()
    done = batch(sim).read_namespaced_job("train", NAMESPACE)
    assert done.status.succeeded == 3 and done.status.active is None
    assert conditions(sim, "train") == [
        ("SuccessCriteriaMet", "True", "CompletionsReached"),
        ("Complete", "True", "CompletionsReached"),
    ]
    assert done.status.completion_time is not None
    assert events(sim, "train")[-1] == ("Completed", "Job completed")
    assert [r for r, _ in events(sim, "train")].count("SuccessfulCreate") == 3


def test_an_indexed_job_gives_each_pod_its_index(sim: SimulatedCluster, clock: Clock) -> None:
    batch(sim).create_namespaced_job(
        NAMESPACE, job("ranks", completions=3, parallelism=3, completionMode="Indexed")
    )
    pods = pods_of(sim, "ranks")
    indexes = sorted(int(p["metadata"]["annotations"][INDEX]) for p in pods)
    assert indexes == [0, 1, 2]
    for pod in pods:
        index = pod["metadata"]["annotations"][INDEX]
        assert pod["metadata"]["labels"][INDEX] == index
        assert pod["metadata"]["name"].startswith(f"ranks-{index}-")
        assert pod["spec"]["hostname"] == f"ranks-{index}"
        (env,) = pod["spec"]["containers"][0]["env"]
        assert env == {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {
                    "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                }
            },
        }
    bind_all(sim)
    sim.run_once()
    one = next(p for p in pods if p["metadata"]["annotations"][INDEX] == "1")
    fail(sim, one["metadata"]["name"])
    clock.advance(9)
    sim.run_once()  # index 1 waits out the 10 s back-off from its failure
    status = batch(sim).read_namespaced_job("ranks", NAMESPACE).status
    assert (status.failed, status.active) == (1, 2)
    clock.advance(1)
    sim.run_once()
    (retry,) = [p for p in pods_of(sim, "ranks") if p["status"]["phase"] == "Pending"]
    assert retry["metadata"]["annotations"][INDEX] == "1"
    clock.advance(591)
    sim.run_once()  # 0 and 2 succeed
    status = batch(sim).read_namespaced_job("ranks", NAMESPACE).status
    assert (status.succeeded, status.completed_indexes, status.active) == (2, "0,2", 1)

    bind_all(sim)
    sim.run_once()
    clock.advance(601)
    sim.run_once()
    status = batch(sim).read_namespaced_job("ranks", NAMESPACE).status
    assert (status.succeeded, status.completed_indexes, status.failed) == (3, "0-2", 1)
    assert ("Complete", "True", "CompletionsReached") in conditions(sim, "ranks")


def test_suspend_resume_and_suspend_again(sim: SimulatedCluster, clock: Clock) -> None:
    jobs = batch(sim)
    jobs.create_namespaced_job(NAMESPACE, job("queued", parallelism=2, completions=2, suspend=True))
    assert pods_of(sim, "queued") == []
    status = jobs.read_namespaced_job("queued", NAMESPACE).status
    assert conditions(sim, "queued") == [("Suspended", "True", "JobSuspended")]
    assert status.start_time is None

    # Suspended and never started: the template's scheduling directives may change (Kueue
    # writes its flavor's node selector before it unsuspends).
    selector = {"cloud.provider.com/topology-rack": "r1"}
    placement = {"spec": {"template": {"spec": {"nodeSelector": selector}}}}
    jobs.patch_namespaced_job("queued", NAMESPACE, placement)
    clock.advance(30)
    jobs.patch_namespaced_job("queued", NAMESPACE, {"spec": {"suspend": False}})
    pods = pods_of(sim, "queued")
    assert len(pods) == 2 and all(p["spec"]["nodeSelector"] == selector for p in pods)
    resumed = jobs.read_namespaced_job("queued", NAMESPACE).status
    assert conditions(sim, "queued") == [("Suspended", "False", "JobResumed")]
    assert resumed.start_time.isoformat() == "2026-01-05T09:00:30+00:00"
    assert resumed.active == 2

    bind_all(sim)
    sim.run_once()
    clock.advance(60)
    jobs.patch_namespaced_job("queued", NAMESPACE, {"spec": {"suspend": True}})
    suspended = jobs.read_namespaced_job("queued", NAMESPACE).status
    assert conditions(sim, "queued") == [("Suspended", "True", "JobSuspended")]
    assert (suspended.active, suspended.terminating, suspended.failed) == (None, 2, None)
    assert all(p["metadata"].get("deletionTimestamp") for p in pods_of(sim, "queued"))
    assert all(
        TRACKING not in (p["metadata"].get("finalizers") or []) for p in pods_of(sim, "queued")
    )

    clock.advance(31)
    sim.run_once()  # the kubelet stops them at the end of their grace period
    assert pods_of(sim, "queued") == []
    gone = jobs.read_namespaced_job("queued", NAMESPACE).status
    assert (gone.terminating, gone.failed) == (0, None)  # a suspension is not a failure
    reasons = [r for r, _ in events(sim, "queued")]
    assert reasons.count("Suspended") == 2 and reasons.count("Resumed") == 1
    assert reasons.count("SuccessfulDelete") == 2


def test_backoff_limit_fails_the_job_once_its_pods_are_gone(
    sim: SimulatedCluster, clock: Clock
) -> None:
    batch(sim).create_namespaced_job(
        NAMESPACE, job("flaky", parallelism=2, completions=4, backoffLimit=1)
    )
    bind_all(sim)
    sim.run_once()
    first, second = pods_of(sim, "flaky")
    fail(sim, first["metadata"]["name"])
    assert batch(sim).read_namespaced_job("flaky", NAMESPACE).status.failed == 1
    assert conditions(sim, "flaky") == []
    clock.advance(10)
    sim.run_once()  # its replacement, after the back-off
    bind_all(sim)
    sim.run_once()
    (replacement,) = [p for p in pods_of(sim, "flaky") if p["status"]["phase"] == "Running"
                      and p["metadata"]["name"] != second["metadata"]["name"]]  # fmt: skip
    fail(sim, replacement["metadata"]["name"])  # two failures: more than backoffLimit 1
    assert conditions(sim, "flaky") == [("FailureTarget", "True", "BackoffLimitExceeded")]
    running = sim.kube.pod(NAMESPACE, second["metadata"]["name"])
    assert running["metadata"].get("deletionTimestamp")  # the rest is stopped

    clock.advance(31)
    sim.run_once()
    failed = batch(sim).read_namespaced_job("flaky", NAMESPACE).status
    assert conditions(sim, "flaky") == [
        ("FailureTarget", "True", "BackoffLimitExceeded"),
        ("Failed", "True", "BackoffLimitExceeded"),
    ]
    assert failed.failed == 3 and failed.completion_time is None and failed.active is None
    assert ("BackoffLimitExceeded", "Job has reached the specified backoff limit") in events(
        sim, "flaky"
    )


def test_active_deadline_counts_from_the_start(sim: SimulatedCluster, clock: Clock) -> None:
    batch(sim).create_namespaced_job(NAMESPACE, job("slow", activeDeadlineSeconds=120))
    bind_all(sim)
    sim.run_once()
    clock.advance(119)
    sim.run_once()
    assert conditions(sim, "slow") == []
    clock.advance(1)
    sim.run_once()
    assert conditions(sim, "slow") == [("FailureTarget", "True", "DeadlineExceeded")]
    clock.advance(31)
    sim.run_once()
    assert conditions(sim, "slow")[-1] == ("Failed", "True", "DeadlineExceeded")
    assert batch(sim).read_namespaced_job("slow", NAMESPACE).status.failed == 1
