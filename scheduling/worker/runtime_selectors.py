"""What run-time prediction reads (scheduling.worker.runtime_feed): finished workloads and how long
they ran, and the shape of the workloads it predicts for. Reads only."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Min

from scheduling.core.queueing.runtime import JobShape
from scheduling.models import ClusterQueue, LocalQueue, Pod, Workload

BATCH = 5000  # finished workloads learnt per read


@dataclass(frozen=True)
class FinishedRuntime:
    workload_id: int
    shape: JobShape
    duration_s: float
    finished_at: float  # Unix time
    finished: datetime  # the same, as stored


@dataclass(frozen=True)
class WorkloadFacts:
    key: str  # "tenant/name", as the core's PodRequest.workload
    shape: JobShape
    started_at: float | None  # when its first pod started running
    limit_s: float | None  # maximumExecutionTimeSeconds: it runs no longer than that
    # Its ClusterQueue's gpusched.io/default-runtime, seconds, and that queue's name
    queue_default_s: float | None = None
    cluster_queue: str = ""


def finished_runtimes(
    *,
    after: datetime | None = None,
    since: datetime | None = None,
    exclude_ids: Collection[int] = (),
    limit: int = BATCH,
) -> list[FinishedRuntime]:
    """Workloads that finished (succeeded) after `after` (or at or after `since`), but for
    `exclude_ids`, in the order they finished, and their run time from their first pod's start
    to the workload's end. By when they finished, not by id: a long job finishes after many
    submitted later, and an id cursor passed it by for good."""
    finished = Workload.objects.filter(state=Workload.State.FINISHED, finished_at__isnull=False)
    if after is not None:
        finished = finished.filter(finished_at__gt=after)
    if since is not None:
        finished = finished.filter(finished_at__gte=since)
    if exclude_ids:
        finished = finished.exclude(pk__in=list(exclude_ids))
    rows = list(
        finished.annotate(first_start=Min("pods__started_at"))
        .filter(first_start__isnull=False)
        .select_related("tenant")
        .order_by("finished_at", "pk")[:limit]
    )
    shapes = _shapes([w.pk for w in rows])
    return [
        FinishedRuntime(
            w.pk,
            JobShape.of(w.tenant.name, w.name, pod_sets=shapes.get(w.pk, ())),
            (w.finished_at - w.first_start).total_seconds(),
            w.finished_at.timestamp(),
            w.finished_at,
        )
        for w in rows
        if w.finished_at is not None
    ]


def workload_facts(keys: Sequence[str]) -> list[WorkloadFacts]:
    """Shape, start, declared limit and queue default of the workloads named "tenant/name"."""
    wanted: dict[str, set[str]] = defaultdict(set)
    for key in keys:
        tenant, _, name = key.partition("/")
        if name:
            wanted[tenant].add(name)
    out: list[WorkloadFacts] = []
    for tenant, names in wanted.items():
        rows = list(
            Workload.objects.filter(tenant__name=tenant, name__in=names)
            .annotate(first_start=Min("pods__started_at"))
            .values_list(
                "pk",
                "name",
                "first_start",
                "maximum_execution_time_s",
                "cluster_queue__name",
                "queue_name",
                "tenant__namespace",
            )
        )
        shapes = _shapes([pk for pk, *_ in rows])
        defaults = _queue_defaults({(ns, lq) for *_, lq, ns in rows})
        for pk, name, started, limit, admitted_to, local_queue, namespace in rows:
            # The queue whose quota it holds, else the one its LocalQueue points at
            queue = admitted_to or defaults.local.get((namespace, local_queue), "")
            out.append(
                WorkloadFacts(
                    f"{tenant}/{name}",
                    JobShape.of(tenant, name, pod_sets=shapes.get(pk, ())),
                    started.timestamp() if started else None,
                    float(limit) if limit else None,
                    defaults.runtime_s.get(queue),
                    queue,
                )
            )
    return out


@dataclass(frozen=True)
class _QueueDefaults:
    local: dict[tuple[str, str], str]  # (namespace, LocalQueue) -> its ClusterQueue
    runtime_s: dict[str, float]  # ClusterQueue -> gpusched.io/default-runtime, where set


def _queue_defaults(local_queues: set[tuple[str, str]]) -> _QueueDefaults:
    local: dict[tuple[str, str], str] = {}
    for namespace, name, queue in LocalQueue.objects.filter(
        namespace__in={ns for ns, _ in local_queues}
    ).values_list("namespace", "name", "cluster_queue__name"):
        if (namespace, name) in local_queues:
            local[namespace, name] = queue
    runtime_s = {
        name: seconds
        for name, seconds in ClusterQueue.objects.filter(
            default_runtime_s__isnull=False
        ).values_list("name", "default_runtime_s")
        if seconds is not None
    }
    return _QueueDefaults(local, runtime_s)


def _shapes(workload_ids: Sequence[int]) -> dict[int, tuple[tuple[int, int], ...]]:
    """Per workload: (pods, GPUs per pod) of each pod set, in pod-set name order."""
    counts: dict[int, dict[str, list[int]]] = defaultdict(dict)
    for wid, pod_set, gpus in Pod.objects.filter(workload_id__in=list(workload_ids)).values_list(
        "workload_id", "pod_set", "gpus"
    ):
        entry = counts[wid].setdefault(pod_set, [0, gpus])
        entry[0] += 1
    return {
        wid: tuple((n, g) for _, (n, g) in sorted(sets.items())) for wid, sets in counts.items()
    }
