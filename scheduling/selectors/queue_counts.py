"""The one read model of the queues' counts, per LocalQueue: workloads waiting for quota, admitted
(holding quota, running or not: Kueue's admittedWorkloads) and running; pods waiting for quota
(their workload is not admitted) and pods waiting for a node (their workload is admitted); GPUs
held. The REST API's local queues, the Queues page (its tables and its summary) and /metrics all
read these (docs/dashboard.md has the definitions). A few aggregates in SQL, whatever the number
of pods; asked for one namespace, the same per-queue figures (each counts its own queue's rows)."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Count, Exists, OuterRef, Q, Sum

from scheduling.core.types import MILLI_PER_GPU
from scheduling.models import GpuAssignment, LocalQueue, Pod, Workload

QueueKey = tuple[str, str]  # (namespace, LocalQueue name)

ADMITTED_STATES = (Workload.State.ADMITTED, Workload.State.RUNNING)


@dataclass
class QueueCounts:
    cluster_queue: str | None  # None: no LocalQueue of that name (its workloads are inadmissible)
    waiting_for_quota: int = 0  # workloads not admitted yet
    admitted: int = 0  # workloads holding quota, running or not
    running: int = 0  # of the admitted, those in state Running
    pods_waiting_for_quota: int = 0  # pending pods of workloads not admitted yet
    pods_waiting_for_node: int = 0  # pending pods of admitted workloads
    gpus_held: float = 0.0  # whole and shared GPUs (milli / 1000) of active assignments


def local_queue_counts(namespace: str | None = None) -> dict[QueueKey, QueueCounts]:
    """Per LocalQueue (and per queue name a workload uses that has no LocalQueue), its counts;
    only `namespace`'s when given."""
    queues = LocalQueue.objects.all()
    workloads = Workload.objects.filter(state__in=Workload.ACTIVE_STATES)
    pods = Pod.objects.filter(phase=Pod.Phase.PENDING, workload__state__in=Workload.ACTIVE_STATES)
    held = GpuAssignment.objects.filter(active=True, mig_slot__isnull=True)
    if namespace is not None:
        queues = queues.filter(namespace=namespace)
        workloads = workloads.filter(tenant__namespace=namespace)
        pods = pods.filter(workload__tenant__namespace=namespace)
        held = held.filter(allocation__pod__workload__tenant__namespace=namespace)
    result = {
        (ns, name): QueueCounts(cluster_queue)
        for ns, name, cluster_queue in queues.values_list(
            "namespace", "name", "cluster_queue__name"
        )
    }

    def counts(key: QueueKey) -> QueueCounts:
        return result.setdefault(key, QueueCounts(None))

    for ns, name, state, n in (
        workloads.values_list("tenant__namespace", "queue_name", "state")
        .annotate(n=Count("id"))
        .order_by()
    ):
        queue = counts((ns, name))
        if state == Workload.State.PENDING:
            queue.waiting_for_quota += n
        else:
            queue.admitted += n
            queue.running += n if state == Workload.State.RUNNING else 0
    admitted = Q(workload__state__in=ADMITTED_STATES)
    for ns, name, for_node, for_quota in (
        pods.values_list("workload__tenant__namespace", "workload__queue_name")
        .annotate(
            for_node=Count("id", filter=admitted),
            for_quota=Count("id", filter=~admitted),
        )
        .order_by()
    ):
        queue = counts((ns, name))
        queue.pods_waiting_for_node += for_node
        queue.pods_waiting_for_quota += for_quota
    for ns, name, milli in (
        held.values_list(
            "allocation__pod__workload__tenant__namespace", "allocation__pod__workload__queue_name"
        )
        .annotate(milli=Sum("milli"))
        .order_by()
    ):
        counts((ns, name)).gpus_held = round((milli or 0) / MILLI_PER_GPU, 2)
    return result


def cluster_queue_counts(names: list[str]) -> dict[str, QueueCounts]:
    """The LocalQueues' counts summed per ClusterQueue (of `names`; queue names with no
    LocalQueue belong to none), plus what the admitted workloads of a LocalQueue gone since
    (deleted from the cluster) still hold in the ClusterQueue that admitted them."""
    result = {name: QueueCounts(name) for name in names}
    for queue in [*local_queue_counts().values(), *_admitted_without_local_queue().values()]:
        total = result.get(queue.cluster_queue or "")
        if total is None:
            continue
        total.waiting_for_quota += queue.waiting_for_quota
        total.admitted += queue.admitted
        total.running += queue.running
        total.pods_waiting_for_quota += queue.pods_waiting_for_quota
        total.pods_waiting_for_node += queue.pods_waiting_for_node
        total.gpus_held = round(total.gpus_held + queue.gpus_held, 2)
    return result


def _admitted_without_local_queue() -> dict[str, QueueCounts]:
    """Per ClusterQueue, the admitted workloads whose LocalQueue no longer exists and their pods
    waiting for a node: a workload holds its admission, not its LocalQueue (Kueue), and such
    work would otherwise be in no ClusterQueue's count."""
    gone = ~Exists(
        LocalQueue.objects.filter(
            namespace=OuterRef("tenant__namespace"), name=OuterRef("queue_name")
        )
    )
    result: dict[str, QueueCounts] = {}
    admitted = Workload.objects.filter(state__in=ADMITTED_STATES, cluster_queue__isnull=False)
    for cluster_queue, state, n in (
        admitted.filter(gone)
        .values_list("cluster_queue__name", "state")
        .annotate(n=Count("id"))
        .order_by()
    ):
        queue = result.setdefault(cluster_queue, QueueCounts(cluster_queue))
        queue.admitted += n
        queue.running += n if state == Workload.State.RUNNING else 0
    for cluster_queue, n in (
        Pod.objects.filter(phase=Pod.Phase.PENDING, workload__in=admitted.filter(gone))
        .values_list("workload__cluster_queue__name")
        .annotate(n=Count("id"))
        .order_by()
    ):
        result.setdefault(cluster_queue, QueueCounts(cluster_queue)).pods_waiting_for_node += n
    return result
