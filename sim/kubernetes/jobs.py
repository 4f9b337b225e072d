"""The Job controller of kube-controller-manager (kubernetes/kubernetes pkg/controller/job:
job_controller.go, indexed_job_utils.go, backoff_utils.go; the behaviour documented at
https://kubernetes.io/docs/concepts/workloads/controllers/job/), run synchronously on every
change of a Job or of a pod it owns, and on `tick()` for what time brings (activeDeadlineSeconds,
the pod failure back-off). As in Kubernetes 1.31 and later, where the terminal conditions wait
for the pods to terminate.

- Pods: from the template, named `<job>-<suffix>` (Indexed: `<job>-<index>-<suffix>`), owned by
  the Job (controller, blockOwnerDeletion), carrying the template's labels (the API server added
  `job-name`, `batch.kubernetes.io/job-name`, `controller-uid`,
  `batch.kubernetes.io/controller-uid`) and the finalizer `batch.kubernetes.io/job-tracking`
  until the controller has counted them. Indexed pods get the annotation and label
  `batch.kubernetes.io/job-completion-index`, the hostname `<job>-<index>` and the
  `JOB_COMPLETION_INDEX` environment variable; the lowest pending indexes are created first.
- How many: parallelism, but never more than the completions still missing (with no
  completions, none once one pod succeeded); extra pods are deleted (not-yet-bound, not-ready,
  newest first). A pod that failed delays the next creations by 10 s, doubled per failure since
  the last success, up to 10 minutes. With podReplacementPolicy TerminatingOrFailed (the
  default) a deleted pod counts as failed at once and is replaced; with Failed, only once failed.
- suspend: no pods; suspending deletes the active ones (without counting them as failures) and
  sets the `Suspended` condition (True, JobSuspended, "Job suspended"); resuming sets it False
  (JobResumed, "Job resumed") and restarts status.startTime, as activeDeadlineSeconds counts
  from there; events Suspended / Resumed.
- Status: active, ready, terminating, succeeded, failed (completedIndexes for Indexed Jobs),
  startTime, uncountedTerminatedPods (always empty here: counting is synchronous).
- The end: more failures than backoffLimit (BackoffLimitExceeded, "Job has reached the specified
  backoff limit") or activeDeadlineSeconds passed since startTime (DeadlineExceeded, "Job was
  active longer than specified deadline") adds `FailureTarget` and deletes the active pods; the
  `Failed` condition (same reason) follows once no pod is left running or terminating. Enough
  successes add `SuccessCriteriaMet` (CompletionsReached, "Reached expected number of succeeded
  pods"), then `Complete` and completionTime. Events SuccessfulCreate, SuccessfulDelete,
  FailedCreate, Completed and the failure's reason, from `job-controller`, as core/v1 events.
- A pod that still carries the tracking finalizer but whose Job is gone, or that no Job owns any
  more (orphaned), loses the finalizer.

Not simulated: podFailurePolicy, successPolicy, backoffLimitPerIndex, ttlSecondsAfterFinished,
managedBy, the adoption of orphan pods matching a Job's selector, and the restarts of
restartPolicy OnFailure (the simulated kubelets restart no containers).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from sim.kubernetes.errors import ApiError
from sim.kubernetes.kinds.jobs import condition_true, suspended
from sim.kubernetes.meta import clone, parse_time, rfc3339
from sim.kubernetes.resources import core, named
from sim.kubernetes.store import DELETED, Change

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
JOBS, PODS, EVENTS = named("batch/jobs"), core("pods"), core("events")
TRACKING = "batch.kubernetes.io/job-tracking"
INDEX = "batch.kubernetes.io/job-completion-index"
INDEX_ENV = "JOB_COMPLETION_INDEX"
BACKOFF_S, MAX_BACKOFF_S = 10.0, 600.0  # DefaultJobPodFailureBackOff, MaxJobPodFailureBackOff
COMPONENT = "job-controller"
JOB_KIND = ("batch/v1", "Job")
COMPLETED = ("CompletionsReached", "Reached expected number of succeeded pods")
TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass
class Backoff:
    failures: int = 0  # since the last success
    last_failure: datetime | None = None

    def remaining_s(self, now: datetime) -> float:
        if not self.failures or self.last_failure is None:
            return 0.0
        delay = min(BACKOFF_S * 2 ** (self.failures - 1), MAX_BACKOFF_S)
        return max(0.0, delay - (now - self.last_failure).total_seconds())


def controller_uid(obj: Obj) -> str:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if (
            ref.get("controller")
            and ref.get("kind") == "Job"
            and ref.get("apiVersion") == "batch/v1"
        ):
            return str(ref.get("uid", ""))
    return ""


def completion_index(pod: Obj) -> int | None:
    text = (pod["metadata"].get("annotations") or {}).get(INDEX)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "")


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _condition(kind: str, status: str, reason: str, message: str, now: datetime) -> Obj:
    stamp = rfc3339(now)
    return {"type": kind, "status": status, "lastProbeTime": stamp,
            "lastTransitionTime": stamp, "reason": reason, "message": message}  # fmt: skip


def format_indexes(indexes: set[int]) -> str:
    """`1,3-5,7`: the intervals of status.completedIndexes."""
    parts: list[str] = []
    for index in sorted(indexes):
        if parts and index == int(parts[-1].split("-")[-1]) + 1:
            start = parts[-1].split("-")[0]
            parts[-1] = f"{start}-{index}"
        else:
            parts.append(str(index))
    return ",".join(parts)


def parse_indexes(text: str) -> set[int]:
    found: set[int] = set()
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        found.update(range(int(first), int(last or first) + 1))
    return found


class JobController:
    def __init__(self, api: Registry) -> None:
        self.api = api
        self._queue: dict[tuple[str, str], None] = {}  # an ordered set of Jobs to sync
        self._syncing = False
        self._backoff: dict[str, Backoff] = {}  # by Job uid
        self._event_serial = 0

    # --- triggers ----------------------------------------------------------------------------

    def react(self, api: Registry, change: Change) -> None:
        meta = change.obj["metadata"]
        if change.resource is JOBS:
            if change.type == DELETED:
                self._backoff.pop(str(meta.get("uid")), None)
            else:
                self._queue[(str(meta.get("namespace")), str(meta["name"]))] = None
        elif change.resource is PODS:
            uid = controller_uid(change.obj)
            owner = self.api.storage.find(uid) if uid else None
            if owner is not None and owner.get("kind") == "Job":
                self._queue[(str(owner["metadata"]["namespace"]), owner["metadata"]["name"])] = None
            elif change.type != DELETED and TRACKING in (meta.get("finalizers") or []):
                self.api.remove_finalizer(PODS, change.obj, TRACKING)  # orphaned
        else:
            return
        self._drain()

    def tick(self) -> None:
        """Sync every unfinished Job: deadlines pass and back-offs end with time alone."""
        with self.api.lock:
            for job in self.api.storage.items(JOBS):
                if not (condition_true(job, "Complete") or condition_true(job, "Failed")):
                    self._queue[(str(job["metadata"]["namespace"]), job["metadata"]["name"])] = None
            self._drain()

    def _drain(self) -> None:
        if self._syncing:
            return  # a sync's own writes: the loop below picks their Jobs up
        self._syncing = True
        try:
            while self._queue:
                key = next(iter(self._queue))
                del self._queue[key]
                self._sync(*key)
        finally:
            self._syncing = False

    # --- one Job -----------------------------------------------------------------------------

    def _pods(self, job: Obj) -> list[Obj]:
        """The pods the Job controls, by the store's owner index, in name order."""
        uid = job["metadata"]["uid"]
        found = []
        for key, namespace, name in sorted(self.api.storage.dependents.get(uid, ())):
            pod = self.api.storage.get(PODS, namespace, name) if key == PODS.key else None
            if pod is not None and controller_uid(pod) == uid:
                found.append(pod)
        return found

    def _sync(self, namespace: str, name: str) -> None:
        job = self.api.storage.get(JOBS, namespace, name)
        if job is None:
            return
        now = self.api.now()
        spec, status = job.get("spec") or {}, clone(job.get("status") or {})
        backoff = self._backoff.setdefault(job["metadata"]["uid"], Backoff())
        indexed = spec.get("completionMode") == "Indexed"
        completions = spec.get("completions")
        completed = parse_indexes(status.get("completedIndexes", "")) if indexed else set()
        counts = {"succeeded": int(status.get("succeeded") or 0),
                  "failed": int(status.get("failed") or 0)}  # fmt: skip
        self._count_finished(job, counts, completed, backoff, now)
        if indexed:
            counts["succeeded"] = len(completed)
        pods = self._pods(job)
        active = [p for p in pods if _phase(p) not in TERMINAL_PHASES
                  and not p["metadata"].get("deletionTimestamp")]  # fmt: skip
        terminating = sum(
            1 for p in pods
            if p["metadata"].get("deletionTimestamp") and _phase(p) not in TERMINAL_PHASES
        )  # fmt: skip
        finished = condition_true(job, "Complete") or condition_true(job, "Failed")
        conditions = status.setdefault("conditions", [])
        if not finished:
            if not status.get("startTime") and not suspended(job):
                status["startTime"] = rfc3339(now)
            target = next(
                (c for c in conditions
                 if c.get("type") in ("FailureTarget", "SuccessCriteriaMet")
                 and c.get("status") == "True"), None,
            )  # fmt: skip
            if target is None:
                target = self._failure(job, status, counts["failed"], now)
                if target is not None:
                    conditions.append(target)
            if target is not None and target["type"] == "FailureTarget":
                for pod in active:  # counted as failed once they go (they keep the finalizer)
                    self._delete_pod(job, pod, uncounted=False)
                terminating += len(active)
                active = []
            elif target is None and not job["metadata"].get("deletionTimestamp"):
                active, terminating = self._manage(
                    job, pods, active, terminating, counts["succeeded"], completed, backoff, now
                )
                done = (
                    counts["succeeded"] >= completions
                    if completions is not None
                    else (counts["succeeded"] > 0)
                )
                if done and not active:
                    target = _condition("SuccessCriteriaMet", "True", *COMPLETED, now)
                    conditions.append(target)
                else:
                    self._suspension(job, status, now)
            if target is not None and not active and not terminating:
                self._finish(job, status, target, now)
        status.update(active=len(active), ready=sum(1 for p in active if _ready(p)),
                      terminating=terminating, uncountedTerminatedPods={}, **counts)  # fmt: skip
        if indexed:
            status["completedIndexes"] = format_indexes(completed)
        for key in ("active", "succeeded", "failed", "completedIndexes"):
            if not status.get(key):
                status.pop(key, None)  # omitempty
        if not conditions:
            status.pop("conditions")
        self._write_status(job, status)

    def _count_finished(
        self, job: Obj, counts: dict[str, int], completed: set[int], backoff: Backoff, now: datetime
    ) -> None:
        """Count the pods that ended (or, replacing on termination, are being deleted) and still
        carry the tracking finalizer, and release them."""
        spec = job.get("spec") or {}
        indexed = spec.get("completionMode") == "Indexed"
        completions = int(spec.get("completions") or 0)
        only_failed = spec.get("podReplacementPolicy") == "Failed"
        for pod in self._pods(job):
            if TRACKING not in (pod["metadata"].get("finalizers") or []):
                continue
            index = completion_index(pod)
            valid = not indexed or (index is not None and index < completions)
            phase, deleting = _phase(pod), bool(pod["metadata"].get("deletionTimestamp"))
            if phase == "Succeeded":
                if indexed and valid and index is not None:
                    completed.add(index)
                elif not indexed:
                    counts["succeeded"] += 1
                backoff.failures, backoff.last_failure = 0, None
            elif phase == "Failed" or (deleting and not only_failed):
                counts["failed"] += 1 if valid else 0
                backoff.failures += 1
                backoff.last_failure = now
            else:
                continue
            self.api.remove_finalizer(PODS, pod, TRACKING)

    def _failure(self, job: Obj, status: Obj, failed: int, now: datetime) -> Obj | None:
        spec = job.get("spec") or {}
        if failed > int(spec.get("backoffLimit", 6)):
            return _condition("FailureTarget", "True", "BackoffLimitExceeded",
                              "Job has reached the specified backoff limit", now)  # fmt: skip
        deadline, started = spec.get("activeDeadlineSeconds"), status.get("startTime")
        if (
            deadline is not None
            and started
            and not suspended(job)
            and now >= parse_time(started) + timedelta(seconds=int(deadline))
        ):
            return _condition("FailureTarget", "True", "DeadlineExceeded",
                                  "Job was active longer than specified deadline", now)  # fmt: skip
        return None

    def _finish(self, job: Obj, status: Obj, target: Obj, now: datetime) -> None:
        """The terminal condition once every pod has terminated."""
        if target["type"] == "SuccessCriteriaMet":
            status["conditions"].append(
                _condition("Complete", "True", target["reason"], target["message"], now)
            )
            status["completionTime"] = rfc3339(now)
            self._event(job, "Normal", "Completed", "Job completed", now)
        else:
            status["conditions"].append(
                _condition("Failed", "True", target["reason"], target["message"], now)
            )
            self._event(job, "Warning", target["reason"], target["message"], now)

    def _suspension(self, job: Obj, status: Obj, now: datetime) -> None:
        """The Suspended condition, only ever added True; resuming restarts startTime."""
        conditions = status["conditions"]
        found = next((c for c in conditions if c.get("type") == "Suspended"), None)
        if suspended(job):
            wanted = ("True", "JobSuspended", "Job suspended", "Suspended")
        elif found is not None:
            wanted = ("False", "JobResumed", "Job resumed", "Resumed")
        else:
            return
        if found is not None and (found["status"], found["reason"]) == wanted[:2]:
            return
        updated = _condition("Suspended", wanted[0], wanted[1], wanted[2], now)
        if found is not None:
            conditions[conditions.index(found)] = updated
        else:
            conditions.append(updated)
        self._event(job, "Normal", wanted[3], wanted[2], now)
        if wanted[0] == "False":
            status["startTime"] = rfc3339(now)

    # --- pods --------------------------------------------------------------------------------

    def _manage(
        self,
        job: Obj,
        pods: list[Obj],
        active: list[Obj],
        terminating: int,
        succeeded: int,
        completed: set[int],
        backoff: Backoff,
        now: datetime,
    ) -> tuple[list[Obj], int]:
        spec = job.get("spec") or {}
        if suspended(job):
            for pod in active:
                self._delete_pod(job, pod, uncounted=True)
            return [], terminating + len(active)
        parallelism, completions = int(spec.get("parallelism") or 0), spec.get("completions")
        if completions is None:
            want = len(active) if succeeded else parallelism
        else:
            want = max(0, min(int(completions) - succeeded, parallelism))
        indexed = spec.get("completionMode") == "Indexed"
        surplus, kept = _surplus(active, completed, int(completions or 0) if indexed else None)
        victims = surplus + _removal_order(kept)[: max(0, len(kept) - want)]
        for pod in victims:
            self._delete_pod(job, pod, uncounted=True)
        gone = {p["metadata"]["name"] for p in victims}
        active = [p for p in active if p["metadata"]["name"] not in gone]
        terminating += len(victims)
        if len(active) >= want or backoff.remaining_s(now) > 0:
            return active, terminating
        missing = want - len(active)
        if spec.get("podReplacementPolicy") == "Failed":
            missing = max(0, missing - terminating)
        indexes: list[int | None] = [None] * missing
        if indexed:
            taken = set(completed) | {completion_index(p) for p in active}
            if spec.get("podReplacementPolicy") == "Failed":
                taken |= {
                    completion_index(p) for p in pods if p["metadata"].get("deletionTimestamp")
                }
            pending = [i for i in range(int(completions or 0)) if i not in taken]
            indexes = [*pending[:missing]]
        for index in indexes:
            created = self._create_pod(job, index, now)
            if created is None:
                break
            active.append(created)
        return active, terminating

    def _create_pod(self, job: Obj, index: int | None, now: datetime) -> Obj | None:
        meta, spec = job["metadata"], job.get("spec") or {}
        template = spec.get("template") or {}
        template_meta = template.get("metadata") or {}
        labels = dict(template_meta.get("labels") or {})
        annotations = dict(template_meta.get("annotations") or {})
        pod_spec = clone(template.get("spec") or {})
        prefix = f"{meta['name']}-"
        if index is not None:
            labels[INDEX] = annotations[INDEX] = str(index)
            pod_spec["hostname"] = f"{meta['name']}-{index}"
            suffix = f"-{index}-"
            prefix = meta["name"][: 58 - len(suffix)] + suffix
            for container in [*pod_spec.get("initContainers", []), *pod_spec.get("containers", [])]:
                env = container.setdefault("env", [])
                if not any(v.get("name") == INDEX_ENV for v in env):
                    path = f"metadata.annotations['{INDEX}']"
                    env.append({"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": path}}})
        pod = {
            "metadata": {
                "generateName": prefix,
                "labels": labels,
                "annotations": annotations,
                "finalizers": [*(template_meta.get("finalizers") or []), TRACKING],
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],  # fmt: skip
            },
            "spec": pod_spec,
        }
        if not annotations:
            pod["metadata"].pop("annotations")
        try:
            created = self.api.create(PODS, meta["namespace"], pod)
        except ApiError as exc:
            self._event(job, "Warning", "FailedCreate", f"Error creating: {exc.message}", now)
            return None
        self._event(job, "Normal", "SuccessfulCreate",
                    f"Created pod: {created['metadata']['name']}", now)  # fmt: skip
        return created

    def _delete_pod(self, job: Obj, pod: Obj, *, uncounted: bool) -> None:
        """Delete a pod; `uncounted` releases it first, so it never counts as a failure."""
        current = self.api.storage.get(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
        if current is None:
            return
        if uncounted and TRACKING in (current["metadata"].get("finalizers") or []):
            self.api.remove_finalizer(PODS, current, TRACKING)
        with contextlib.suppress(ApiError):  # gone already
            self.api.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"])
            self._event(job, "Normal", "SuccessfulDelete",
                        f"Deleted pod: {pod['metadata']['name']}", self.api.now())  # fmt: skip

    # --- writes ------------------------------------------------------------------------------

    def _write_status(self, job: Obj, status: Obj) -> None:
        current = self.api.storage.get(JOBS, job["metadata"]["namespace"], job["metadata"]["name"])
        if current is None or current.get("status") == status:
            return
        updated = {**current, "metadata": dict(current["metadata"]), "status": status}
        self.api.write(JOBS, updated)

    def _event(self, job: Obj, kind: str, reason: str, message: str, now: datetime) -> None:
        """A core/v1 event as client-go's legacy recorder writes it for the controller."""
        meta = job["metadata"]
        self._event_serial += 1
        stamp = rfc3339(now)
        nanos = int(now.timestamp() * 1e9) + self._event_serial
        event = {
            "metadata": {"name": f"{meta['name']}.{nanos:x}", "namespace": meta["namespace"]},
            "involvedObject": {"kind": "Job", "namespace": meta["namespace"], "name": meta["name"],
                               "uid": meta["uid"], "apiVersion": "batch/v1",
                               "resourceVersion": meta.get("resourceVersion", "")},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": COMPONENT}, "firstTimestamp": stamp, "lastTimestamp": stamp,
            "count": 1, "reportingComponent": COMPONENT, "reportingInstance": "",
        }  # fmt: skip
        with contextlib.suppress(ApiError):  # best effort, as the recorder's
            self.api.create(EVENTS, meta["namespace"], event)


def _surplus(
    active: list[Obj], completed: set[int], completions: int | None
) -> tuple[list[Obj], list[Obj]]:
    """For an Indexed Job, the pods whose index is out of range, completed or taken by an older
    pod (to delete whatever the count), and the others."""
    if completions is None:
        return [], list(active)
    seen: set[int] = set()
    surplus, kept = [], []
    for pod in sorted(active, key=lambda p: p["metadata"].get("creationTimestamp", "")):
        index = completion_index(pod)
        if index is None or index >= completions or index in completed or index in seen:
            surplus.append(pod)
        else:
            seen.add(index)
            kept.append(pod)
    return surplus, kept


def _removal_order(pods: list[Obj]) -> list[Obj]:
    """The order the controller deletes extra pods in: not yet bound, not ready, newest first."""
    newest = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    return sorted(newest, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), _ready(p)))
