"""Submitted workloads as real Kubernetes objects: each workload a parent ConfigMap in its tenant's
namespace, each of its pods a Pod owned by it, so deleting the parent (a cancel) deletes them
through the garbage collector. The pods carry our schedulerName, Kueue's queue label and, for a
gang, Kueue's pod-group label and total count (so Kueue, where installed, sees the same workload),
gpusched's topology annotations, and the uid of the Pod row they stand for (how the side links
them back). A pod evicted from its node is made again once its workload is readmitted.

The manifests are pure (`pod_manifest`, `parent_manifest`); `Materializer` creates what is
missing each cycle, with the annotations KUBE_POD_ANNOTATIONS adds (a dotted path: a function of
the pods about to be made answering, per pod id, more annotations; the harness names the one that
tells the simulated kubelet how long each pod runs and how busy it keeps its GPUs).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from kube import groups
from kube.api import KubeApi
from kube.models import KubePod
from kube.translate import (
    ANNOTATION_MODELS,
    ANNOTATION_POLICY,
    ANNOTATION_SCOPE,
    ANNOTATION_SERVICE_CLASS,
    QUEUE_LABEL,
)
from scheduling import pod_resources, services
from scheduling.core import resource_requests
from scheduling.core.queueing.admission import INADMISSIBLE
from scheduling.models import Pod, Workload

logger = logging.getLogger(__name__)

POD_UID_ANNOTATION = "gpusched.io/pod-uid"
WORKLOAD_LABEL = "gpusched.io/workload"
POD_SET_LABEL = "gpusched.io/pod-set"
DEFAULT_IMAGE = "registry.k8s.io/pause:3.10"


def parent_name(workload: Workload) -> str:
    return f"gpusched-{workload.name}"[:253]


def parent_manifest(workload: Workload) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": parent_name(workload),
            "namespace": workload.tenant.namespace,
            "labels": {WORKLOAD_LABEL: workload.name[:63]},
        },
        "data": {"uid": str(workload.uid), "podSets": json.dumps(workload.pod_sets)},
    }


PodAnnotations = Callable[[Sequence[Pod]], Mapping[int, Mapping[str, str]]]


def pod_annotations() -> PodAnnotations | None:
    """The function KUBE_POD_ANNOTATIONS names, or None."""
    path = getattr(settings, "KUBE_POD_ANNOTATIONS", "")
    return import_string(path) if path else None


def pod_manifest(
    pod: Pod,
    *,
    scheduler_name: str,
    parent: Mapping[str, Any],
    image: str,
    more_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    workload = pod.workload
    labels = {
        QUEUE_LABEL: workload.queue_name,
        WORKLOAD_LABEL: workload.name[:63],
        POD_SET_LABEL: pod.pod_set,
    }
    annotations = {POD_UID_ANNOTATION: str(pod.uid), ANNOTATION_SERVICE_CLASS: pod.service_class}
    if pod.gang_min_count:
        labels[groups.KUEUE_GROUP_LABEL] = f"{workload.name}-{pod.pod_set}"[:63]
        annotations[groups.KUEUE_TOTAL_COUNT] = str(pod.gang_min_count)
    if pod.topology_policy != "none":
        annotations[ANNOTATION_POLICY] = pod.topology_policy
    if pod.topology_scope:
        annotations[ANNOTATION_SCOPE] = pod.topology_scope
    constraints = pod.constraints
    if constraints.gpu_models:
        annotations[ANNOTATION_MODELS] = ",".join(constraints.gpu_models)
    annotations.update(more_annotations or {})
    quantities = resource_requests.write(pod_resources.resources_of(pod))
    limits = {r: v for r, v in quantities.items() if r not in resource_requests.REQUESTED}
    meta = parent.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": workload.tenant.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "name": meta.get("name"),
                    "uid": meta.get("uid"),
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "nodeSelector": {**constraints.node_selector, **(workload.node_selector or {})} or None,
            "tolerations": [*constraints.tolerations, *(workload.tolerations or [])] or None,
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "resources": {"requests": quantities, "limits": limits or None},
                }
            ],
        },
    }


@dataclass
class Materializer:
    api: KubeApi
    scheduler_name: str
    image: str = field(default_factory=lambda: getattr(settings, "KUBE_POD_IMAGE", DEFAULT_IMAGE))
    _parents: dict[int, dict[str, Any]] = field(default_factory=dict)  # workload id -> ConfigMap
    _deleted: set[int] = field(default_factory=set)  # ended workloads whose parent is deleted

    def run_once(self) -> int:
        """Create the pods of submitted workloads that have none in the cluster yet, and delete
        the objects of those that ended; returns how many pods were created. Where nothing was
        ever submitted through the REST API (a cluster whose users create their own pods), one
        short read says so, and the two joins over every mirrored pod are not made."""
        if not Workload.objects.filter(origin=Workload.Origin.SUBMITTED).exists():
            return 0
        self._delete_ended()
        missing = list(
            Pod.objects.filter(
                phase=Pod.Phase.PENDING,
                kube__isnull=True,
                workload__origin=Workload.Origin.SUBMITTED,
                workload__state__in=Workload.ACTIVE_STATES,
            )
            .select_related("workload__tenant", "constraints")
            .order_by("id")
        )
        created = 0
        annotate = pod_annotations()
        more = annotate(missing) if annotate is not None and missing else {}
        for pod in missing:
            parent = self._parent(pod.workload)
            if parent is None:
                continue
            manifest = pod_manifest(
                pod,
                scheduler_name=self.scheduler_name,
                parent=parent,
                image=self.image,
                more_annotations=more.get(pod.pk),
            )
            outcome = self.api.create(manifest)
            if outcome.created:
                created += 1
            elif outcome.status != 409:  # 409: made already, the informer shows it soon
                logger.warning(
                    "pod %s/%s: %s", manifest["metadata"]["namespace"], pod.name, outcome.message
                )
        return created

    def _parent(self, workload: Workload) -> dict[str, Any] | None:
        known = self._parents.get(workload.pk)
        if known is not None:
            return known
        manifest = parent_manifest(workload)
        namespace, name = workload.tenant.namespace, manifest["metadata"]["name"]
        outcome = self.api.create(manifest)
        if outcome.status == 404:  # the tenant's namespace does not exist in the cluster
            self._wait(workload, f"Namespace {namespace} does not exist in the cluster")
            return None
        parent = outcome.obj if outcome.created else self.api.read_config_map(namespace, name)
        if parent is None or (parent.get("data") or {}).get("uid") != str(workload.uid):
            logger.warning("ConfigMap %s/%s is not workload %s's", namespace, name, workload.uid)
            return None
        self._parents[workload.pk] = parent
        return parent

    def _wait(self, workload: Workload, message: str) -> None:
        """Why the workload's pods are not made: on the workload, once per change."""
        services.workloads_waiting(updates=[(workload, INADMISSIBLE, message)])

    def _delete_ended(self) -> None:
        """A cancelled or finished submitted workload whose pods still exist: its parent goes,
        and the garbage collector takes the pods (each link goes when its pod is gone)."""
        ended = (
            Workload.objects.filter(
                origin=Workload.Origin.SUBMITTED,
                pk__in=KubePod.objects.values("pod__workload_id"),
            )
            .exclude(state__in=Workload.ACTIVE_STATES)
            .exclude(pk__in=self._deleted)
            .select_related("tenant")
        )
        for workload in ended:
            if self.api.delete_config_map(workload.tenant.namespace, parent_name(workload)):
                self._parents.pop(workload.pk, None)
                self._deleted.add(workload.pk)
