"""The cluster's figures the web process's /metrics exports from scheduling's rows, read at scrape
time (registered in gpusched/web_metrics.py): queue depth per ClusterQueue, workloads and pods by
state, nodes and GPUs, and each tenant's held vs busy GPUs over the last hour (the numbers of the
Tenants page and GET /api/v1/usage: scheduling.selectors.efficiency, docs/dashboard.md).
Aggregates only (per cluster queue, phase, state or tenant, all admin-created and few): no
workload, pod or node names."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

from django.db.models import Count, Min, Q, Sum
from prometheus_client.core import GaugeMetricFamily

from common.metric_families import age, counts, gauge
from scheduling.core.types import MILLI_PER_GPU
from scheduling.models import Allocation, ClusterQueue, Gpu, Node, Pod, Workload
from scheduling.selectors import queue_counts
from scheduling.selectors.efficiency import recent_tenant_efficiency
from scheduling.selectors.queue_sources import cluster_queues_deleted_from_source


def _counts_by(
    model: type[Workload] | type[Pod], field: str, values: Sequence[str]
) -> dict[str, int]:
    """Rows of `model` per value of `field`, for the given values."""
    rows = (
        model.objects.filter(**{f"{field}__in": values})
        .values_list(field)
        .annotate(n=Count("id"))
        .order_by()
    )
    return counts(rows, values)


class SchedulingCollector:
    """Queue depth, workloads, pods, nodes and GPUs."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._queues()
        yield from self._cluster()
        yield from self._efficiency()

    def _efficiency(self) -> Iterable[GaugeMetricFamily]:
        """Per tenant, over the last hour's measured minutes it existed in: GPUs held (mean), GPUs
        busy (p95) and overRequest (held / busy p95; no sample where it is undefined)."""
        numbers = recent_tenant_efficiency()
        label = "tenant"
        measured = {name: e for name, e in numbers.items() if e.minutes}
        yield gauge(
            "gpusched_tenant_gpus_held",
            "GPUs a tenant's pods held, time-weighted mean over the last hour's measured minutes.",
            {name: e.requested_gpus for name, e in measured.items()},
            label,
        )
        yield gauge(
            "gpusched_tenant_gpus_busy_p95",
            "GPUs a tenant's pods kept busy (DCGM), nearest-rank p95 of the last hour's minutes.",
            {name: e.used_p95_gpus or 0.0 for name, e in measured.items()},
            label,
        )
        yield gauge(
            "gpusched_tenant_over_request",
            "GPUs held / GPUs busy p95 over the last hour (absent: nothing busy or < 5 minutes).",
            {name: e.over_request for name, e in measured.items() if e.over_request is not None},
            label,
        )
        yield gauge(
            "gpusched_tenant_measured_minutes",
            "Measured minutes of the last hour a tenant's held and busy figures are over.",
            {name: e.minutes for name, e in measured.items()},
            label,
        )

    def _queues(self) -> Iterable[GaugeMetricFamily]:
        """Per ClusterQueue, the Queues page's counts (scheduling.selectors.queue_counts):
        workloads waiting for admission, admitted workloads (holding quota), pods waiting for quota
        and pods of admitted workloads waiting for a node."""
        names = list(ClusterQueue.objects.values_list("name", flat=True))
        totals = queue_counts.cluster_queue_counts(names)
        label = "cluster_queue"
        yield gauge(
            "gpusched_queue_pending_workloads",
            "Workloads waiting for admission, per ClusterQueue.",
            {name: c.waiting_for_quota for name, c in totals.items()},
            label,
        )
        # Workloads naming a LocalQueue that does not exist (deleted from the cluster) belong to
        # no ClusterQueue: counted apart, so that a lost queue's waiting work shows.
        yield GaugeMetricFamily(
            "gpusched_queue_pending_workloads_without_local_queue",
            "Workloads waiting for admission whose LocalQueue does not exist (none configured, "
            "or deleted from the cluster): in no ClusterQueue's count.",
            value=sum(
                c.waiting_for_quota
                for c in queue_counts.local_queue_counts().values()
                if c.cluster_queue is None
            ),
        )
        deleted = cluster_queues_deleted_from_source()
        yield gauge(
            "gpusched_queue_terminating",
            "1 for a ClusterQueue deleted from the cluster it is mirrored from, kept (on Hold) "
            "until its admitted workloads are gone; else 0.",
            {name: float(name in deleted) for name in names},
            label,
        )
        yield gauge(
            "gpusched_queue_pending_pods",
            "Pods of admitted workloads waiting for a node, per ClusterQueue.",
            {name: c.pods_waiting_for_node for name, c in totals.items()},
            label,
        )
        yield gauge(
            "gpusched_queue_pods_waiting_for_quota",
            "Pods of workloads not admitted yet (waiting for quota), per ClusterQueue.",
            {name: c.pods_waiting_for_quota for name, c in totals.items()},
            label,
        )
        yield gauge(
            "gpusched_queue_admitted_workloads",
            "Workloads holding quota (admitted or running), per ClusterQueue.",
            {name: c.admitted for name, c in totals.items()},
            label,
        )

    def _cluster(self) -> Iterable[GaugeMetricFamily]:
        workloads = _counts_by(Workload, "state", Workload.ACTIVE_STATES)
        yield gauge("gpusched_workloads", "Active workloads, by state.", workloads, "state")
        pods = _counts_by(Pod, "phase", Pod.ACTIVE_PHASES)
        yield gauge(
            "gpusched_pods",
            "Active pods, by phase (Pending: waiting for a node; Bound, Running: placed).",
            pods,
            "phase",
        )
        queues = queue_counts.local_queue_counts().values()
        yield gauge(
            "gpusched_pods_waiting",
            "Pending pods of active workloads, by what they wait for: quota (their workload is not "
            "admitted) or a node (it is).",
            {
                "quota": sum(q.pods_waiting_for_quota for q in queues),
                "node": sum(q.pods_waiting_for_node for q in queues),
            },
            "for",
        )
        oldest = Pod.objects.filter(
            phase=Pod.Phase.PENDING, workload__state__in=Workload.ACTIVE_STATES
        ).aggregate(created=Min("created_at"))["created"]
        yield GaugeMetricFamily(
            "gpusched_pods_pending_oldest_age_seconds",
            "Age of the oldest pod of an active workload still waiting for a node (0: none waits).",
            value=age(oldest) if oldest else 0.0,
        )
        cordoned = Counter(Node.objects.values_list("cordoned", flat=True))
        yield gauge(
            "gpusched_nodes",
            "Nodes, by state.",
            {"schedulable": cordoned[False], "cordoned": cordoned[True]},
            "state",
        )
        yield GaugeMetricFamily(
            "gpusched_nodes_allocated",
            "Nodes holding at least one active allocation.",
            value=Allocation.objects.filter(active=True).values("node").distinct().count(),
        )
        gpus = Gpu.objects.aggregate(
            total=Count("id"),
            held_milli=Sum("used_milli"),
            in_use=Count("id", filter=Q(used_milli__gt=0)),
        )
        yield GaugeMetricFamily("gpusched_gpus", "GPUs known.", value=gpus["total"])
        yield GaugeMetricFamily(
            "gpusched_gpus_in_use",
            "GPUs holding at least one allocation (whole, shared or MIG).",
            value=gpus["in_use"],
        )
        yield GaugeMetricFamily(
            "gpusched_gpus_allocated",
            "GPUs allocated, in GPUs: shares of shared GPUs add up as fractions.",
            value=(gpus["held_milli"] or 0) / MILLI_PER_GPU,
        )
