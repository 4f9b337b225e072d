"""batch/v1 Jobs as workloads, Kueue's way (kubernetes-sigs/kueue pkg/controller/jobs/job/
job_controller.go and pkg/podset, read for their behaviour; site/content/en/docs/tasks/run/jobs.md):

- A Job with the label `kueue.x-k8s.io/queue-name` that is suspended (created so, or suspended
  by gpusched's admission webhook: kube.webhook), unfinished, and whose pod template names the
  profile's schedulerName becomes ONE workload (origin `job`): one pod set `main` of its
  template x min(parallelism, completions) pods, as Kueue's `podsCount`; an Indexed Job's pods
  are a gang (all placed together). The Job is remembered (kube.models.KubeJob) with the
  template's node selector and tolerations as they were.
- Admitted by the same queues as every workload, it is resumed: one patch sets `spec.suspend`
  false and writes the admitted flavors' node selector and tolerations into the template (Kueue's
  RunWithPodSetsInfo). The Job controller makes the pods; each is linked to one of the
  workload's Pod rows (by completion index for an Indexed Job), and the one cycle places them.
- Evicted (preempted, deactivated, a pods-ready timeout) or cancelled, the Job is stopped as
  Kueue's Stop does: `spec.suspend` true (the Job controller deletes its pods), status.startTime
  cleared so that the template may change again, and the template's node selector and
  tolerations put back as they were; the workload waits in its queue again (a cancelled one
  leaves the Job suspended, as Kueue leaves a deactivated workload's).
- A pod of the Job that ends while the Job goes on frees its Pod row for the next pod; the Job
  finished (its Complete or Failed condition) finishes the workload; the Job deleted cancels it.
- A Job without the label, not suspended when first seen (not ours: its pods, if they name
  gpusched's schedulerName, are mirrored as pods are), or run by another controller (a JobSet's
  child Job, a `spec.managedBy` other than the Job controller) is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from kube import services as kube_services
from kube.api import KubeApi
from kube.informer import Informer
from kube.models import KubeJob
from kube.translate import QUEUE_LABEL, PodInfo, pod_info
from scheduling import services
from scheduling.models import Workload
from scheduling.worker.side import PodEviction, Verdict

logger = logging.getLogger(__name__)

JOB_API = "batch/v1"
POD_SET = "main"  # Kueue's DefaultPodSetName
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOB_CONTROLLER = "kubernetes.io/job-controller"  # spec.managedBy's default
PARENTS = {("batch/v1", "CronJob")}  # controllers whose Jobs are run as any other Job
WANT_RUNNING = (Workload.State.ADMITTED, Workload.State.RUNNING)

Obj = Mapping[str, Any]


class JobError(ValueError):
    """A Job gpusched cannot run as a workload, and why."""


def suspended(job: Obj) -> bool:
    return bool((job.get("spec") or {}).get("suspend"))


def finished(job: Obj) -> tuple[bool, bool]:
    """(finished, succeeded): its Complete or Failed condition is True (Kueue's `Finished`)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return True, condition.get("type") == "Complete"
    return False, False


def _uid(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("uid"))


def queue_name(job: Obj) -> str:
    return str(((job.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "")


def owner_job_uid(pod: Obj) -> str:
    """The uid of the Job controlling the pod ("" when none does)."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and (ref.get("apiVersion"), ref.get("kind")) == (JOB_API, "Job"):
            return str(ref.get("uid") or "")
    return ""


def other_controllers(job: Mapping[str, Any]) -> str:
    """Who else runs the Job ("" when nobody): a controller owner that is not a CronJob, or a
    `spec.managedBy` that is not the Job controller."""
    for ref in (job.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller") and (ref.get("apiVersion"), ref.get("kind")) not in PARENTS:
            return f"{ref.get('kind')} {ref.get('name')}"
    managed_by = (job.get("spec") or {}).get("managedBy")
    if managed_by and managed_by != JOB_CONTROLLER:
        return str(managed_by)
    return ""


@dataclass(frozen=True)
class JobShape:
    """What a Job's workload is made of: its template read as a pod (the Job's uid, its labels
    over the template's), the pod names, and whether they are a gang (Indexed)."""

    info: PodInfo
    names: tuple[str, ...]
    indexed: bool
    node_selector: dict[str, str]
    tolerations: list[dict[str, Any]]

    @property
    def count(self) -> int:
        return len(self.names)


def job_shape(job: Obj) -> JobShape:
    meta, spec = job.get("metadata") or {}, job.get("spec") or {}
    template = spec.get("template") or {}
    template_meta, pod_spec = template.get("metadata") or {}, template.get("spec") or {}
    name = str(meta.get("name") or "")
    given = spec.get("parallelism")
    parallelism = 1 if given is None else int(given)
    completions = spec.get("completions")
    count = parallelism if completions is None else min(parallelism, int(completions))
    if count < 1:
        raise JobError(f"spec.parallelism: {parallelism}: a Job of no pods is not a workload")
    pod = {
        "metadata": {
            "name": name,
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "labels": {**(template_meta.get("labels") or {}), **(meta.get("labels") or {})},
            "annotations": dict(template_meta.get("annotations") or {}),
        },
        "spec": pod_spec,
    }
    info = pod_info(pod)
    if info.ask is None:
        raise JobError(f"spec.template: {info.error}")
    indexed = spec.get("completionMode") == "Indexed"
    return JobShape(
        info=info,
        names=tuple(f"{name}-{k}" for k in range(count)),
        indexed=indexed,
        node_selector=dict(pod_spec.get("nodeSelector") or {}),
        tolerations=list(pod_spec.get("tolerations") or []),
    )


def resume_patch(row: KubeJob) -> dict[str, Any]:
    """Kueue's RunWithPodSetsInfo: unsuspended, with the admitted flavors' node selector and
    tolerations added to the template's own."""
    workload = row.workload
    tolerations = list(row.tolerations)
    tolerations += [t for t in workload.tolerations or [] if t not in tolerations]
    return {
        "spec": {
            "suspend": False,
            "template": {
                "spec": {
                    "nodeSelector": {**row.node_selector, **(workload.node_selector or {})} or None,
                    "tolerations": tolerations or None,
                }
            },
        }
    }


def restore_patch(row: KubeJob, job: Obj) -> dict[str, Any] | None:
    """Kueue's RestorePodSetsInfo: the template's node selector and tolerations as they were
    (None: they are). A merge patch: a key gpusched added is removed with null."""
    pod_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    selector = dict(pod_spec.get("nodeSelector") or {})
    tolerations = list(pod_spec.get("tolerations") or [])
    if selector == row.node_selector and tolerations == row.tolerations:
        return None
    wanted: dict[str, Any] = {key: None for key in selector if key not in row.node_selector}
    wanted.update(row.node_selector)
    return {
        "spec": {
            "template": {
                "spec": {"nodeSelector": wanted or None, "tolerations": row.tolerations or None}
            }
        }
    }


class JobBook:
    """The Jobs the Kubernetes side watches (`informer`), and what it does with them each sync."""

    def __init__(
        self,
        api: KubeApi,
        *,
        scheduler_name: str,
        queues_admit: Callable[[], bool],
        warn_once: Callable[..., None],
        watch_timeout_s: int = 300,
    ) -> None:
        self.api = api
        self.scheduler_name = scheduler_name
        self.queues_admit = queues_admit
        self._warn_once = warn_once
        self.informer = Informer(
            "jobs", api.batch.list_job_for_all_namespaces, watch_timeout_s=watch_timeout_s
        )

    def sync(self, counts: dict[str, int], now: datetime, *, full: bool) -> None:
        """New Jobs become workloads; known ones follow their workload (resumed once admitted,
        stopped once evicted or cancelled) or end it (finished, deleted). Beside Kueue
        (`--admission kueue`) Kueue runs the Jobs: nothing is done."""
        changes = self.informer.drain()
        if not self.queues_admit():
            return
        current = self.informer.snapshot()
        if full:
            changes.update({key: (obj, False) for key, obj in current.items()})
        by_uid = {_uid(obj): obj for obj in current.values()}
        changed = {_uid(obj) for obj, _ in changes.values()}
        known = set(KubeJob.objects.filter(uid__in=list(changed)).values_list("uid", flat=True))
        for obj, deleted in changes.values():
            if not deleted and _uid(obj) not in known and self._new_workload(obj):
                counts["jobs_queued"] = counts.get("jobs_queued", 0) + 1
        # The Jobs to look at: those of active workloads, those that changed or run (a cancelled
        # workload's Job is stopped), and on a full resync all.
        looked_at = (
            set(by_uid)
            if full
            else {uid for uid, obj in by_uid.items() if not suspended(obj) and not finished(obj)[0]}
            | changed
        )
        rows = KubeJob.objects.filter(
            Q(workload__state__in=Workload.ACTIVE_STATES) | Q(uid__in=list(looked_at))
        ).select_related("workload__tenant")
        for row in rows:
            job = by_uid.get(row.uid)
            step = self._follow(row, job, now)
            if step:
                counts[step] = counts.get(step, 0) + 1

    def _new_workload(self, job: Obj) -> bool:
        meta = job.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if not queue_name(job) or not suspended(job) or finished(job)[0]:
            return False
        if other_controllers(job):  # a JobSet's child Job, say: not gpusched's to run
            return False
        try:
            shape = job_shape(job)
        except JobError as exc:
            self._warn_once(f"job:{meta.get('uid')}:{exc}", "Job %s is not run: %s", key, exc)
            return False
        if shape.info.scheduler_name != self.scheduler_name:
            self._warn_once(
                f"job:{meta.get('uid')}:scheduler",
                "Job %s is left alone: its pods are for %s, not %s",
                key,
                shape.info.scheduler_name,
                self.scheduler_name,
            )
            return False
        try:
            kube_services.job_workload(
                namespace=str(meta.get("namespace")), job_name=str(meta.get("name")), shape=shape
            )
        except services.ServiceError as exc:
            self._warn_once(f"job:{meta.get('uid')}:{exc}", "Job %s is not run: %s", key, exc)
            return False
        return True

    def _follow(self, row: KubeJob, job: Obj | None, now: datetime) -> str:
        """One step bringing the Job and its workload together; the step's name, or ""."""
        workload = row.workload
        active = workload.state in Workload.ACTIVE_STATES
        if job is None:
            if active:
                services.workload_cancel(workload=workload, now=now)
                return "jobs_gone"
            return ""
        done, succeeded = finished(job)
        if done:
            if active:
                kube_services.job_finished(workload=workload, succeeded=succeeded, now=now)
                return "jobs_finished"
            return ""
        if workload.state in WANT_RUNNING:
            if suspended(job):
                return "jobs_resumed" if self._patch(row, resume_patch(row)) else ""
            return ""
        return "jobs_suspended" if self.stop(row, job) else ""

    def stop(self, row: KubeJob, job: Obj) -> bool:
        """Kueue's Stop: suspended, then status.startTime cleared (the template is immutable
        while it is set), then the template's scheduling directives restored; each step only when
        still needed, so a stop cut short is finished by the next sync. True when the Job was
        running and is suspended now."""
        stopped = False
        if not suspended(job):
            if not self._patch(row, {"spec": {"suspend": True}}):
                return False
            stopped = True
        if (job.get("status") or {}).get("startTime"):
            status, message = self.api.patch_job(
                row.namespace, row.name, {"status": {"startTime": None}}, status=True
            )
            if status != 200:
                logger.warning("Job %s: clearing status.startTime: %s %s", row, status, message)
                return stopped
        restore = restore_patch(row, job)
        if restore is not None:
            self._patch(row, restore)
        return stopped

    def _patch(self, row: KubeJob, patch: dict[str, Any]) -> bool:
        status, message = self.api.patch_job(row.namespace, row.name, patch)
        if status != 200:
            logger.warning("Job %s: %s %s", row, status, message)
        return status == 200

    def evict(self, evictions: Sequence[PodEviction], said: dict[str, str]) -> dict[str, Verdict]:
        """Evictions of Job workloads' pods: the Job is stopped (its controller deletes the pods,
        and a preempted pod is never made again behind the scheduler's back). A pod with no
        cluster pod is gone at once; the others terminate. Refused when the Job cannot be
        suspended."""
        verdicts: dict[str, Verdict] = {}
        rows = {
            row.workload_id: row
            for row in KubeJob.objects.filter(
                workload_id__in={e.pod.workload_id for e in evictions}
            )
        }
        current = {_uid(obj): obj for obj in self.informer.snapshot().values()}
        stopped: dict[int, bool] = {}
        for eviction in evictions:
            pod = eviction.pod
            row = rows[pod.workload_id]
            if pod.workload_id not in stopped:
                job = current.get(row.uid)
                stopped[pod.workload_id] = job is None or suspended(job) or self.stop(row, job)
            uid = str(pod.uid)
            if not stopped[pod.workload_id]:
                verdicts[uid], said[uid] = Verdict.REFUSED, f"Job {row} could not be suspended"
            elif pod.phase in pod.PLACED_PHASES:
                verdicts[uid], said[uid] = Verdict.TERMINATING, f"Job {row} suspended"
            else:
                verdicts[uid], said[uid] = Verdict.GONE, f"Job {row} suspended"
        return verdicts

    def job_workloads(self, workload_ids: set[int]) -> set[int]:
        """Which of these workloads are Jobs'."""
        return set(
            KubeJob.objects.filter(workload_id__in=workload_ids).values_list(
                "workload_id", flat=True
            )
        )
