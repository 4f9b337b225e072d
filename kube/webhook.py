"""gpusched's mutating admission webhook for batch/v1 Jobs, served by the web process
(POST /webhooks/mutate-batch-v1-job; deploy/job-webhook.yaml registers it for CREATE): what
Kueue's job webhook does for Jobs created unsuspended (kubernetes-sigs/kueue
pkg/controller/jobs/job/job_webhook.go, `Default`, and jobframework's ApplyDefaultForSuspend): a
Job that names a queue gpusched manages is created suspended, so that nothing runs before its
workload is admitted (kube.jobs then resumes it).

The request is an admission.k8s.io/v1 AdmissionReview; the answer is one with the request's uid,
`allowed: true` and, when the Job is to be suspended, a base64 JSONPatch setting spec.suspend. A
Job left as it is: without the queue label, already suspended, another controller's (a JobSet's
child, or a Job `spec.managedBy` someone else), or naming a LocalQueue gpusched does not have
(allowed, with a warning: the Job runs unqueued, as the queue would hold it forever). A review
that is not one is a 400 naming the field (kube-apiserver then applies the failurePolicy).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from kube.jobs import other_controllers
from kube.translate import QUEUE_LABEL
from scheduling.selectors.queues import admits_queue

API_VERSION = "admission.k8s.io/v1"
JOB = {"group": "batch", "version": "v1", "kind": "Job"}


class ReviewError(ValueError):
    """Not an AdmissionReview of a Job: the message names the field."""


def _object(doc: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    value = doc.get(key)
    if not isinstance(value, Mapping):
        raise ReviewError(f"{where}{key}: required, an object")
    return value


def _string(doc: Mapping[str, Any], key: str, where: str) -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value:
        raise ReviewError(f"{where}{key}: required, a string")
    return value


def review(doc: Any) -> dict[str, Any]:
    """The AdmissionReview answering `doc` (ReviewError when it is not a Job's review)."""
    if not isinstance(doc, Mapping):
        raise ReviewError("body: an AdmissionReview object is required")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != "AdmissionReview":
        raise ReviewError(f"apiVersion, kind: must be {API_VERSION}, AdmissionReview")
    request = _object(doc, "request", "")
    uid = _string(request, "uid", "request.")
    if request.get("kind") != JOB:
        raise ReviewError(f"request.kind: must be {JOB}, got {request.get('kind')!r}")
    operation = _string(request, "operation", "request.")
    response: dict[str, Any] = {"uid": uid, "allowed": True}
    answer = {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": response}
    if operation != "CREATE":
        return answer
    job = _object(request, "object", "request.")
    meta = _object(job, "metadata", "request.object.")
    spec = _object(job, "spec", "request.object.")
    labels = meta.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise ReviewError("request.object.metadata.labels: must be an object")
    queue = labels.get(QUEUE_LABEL)
    if not queue or spec.get("suspend") is True or other_controllers(job):
        return answer
    namespace = str(request.get("namespace") or meta.get("namespace") or "")
    if not namespace:
        raise ReviewError("request.namespace: required, a string")
    if not admits_queue(namespace, str(queue)):
        response["warnings"] = [
            f"LocalQueue {namespace}/{queue} does not exist in gpusched: the Job is not queued"
        ]
        return answer
    patch = [{"op": "add", "path": "/spec/suspend", "value": True}]
    response["patchType"] = "JSONPatch"
    response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    return answer
