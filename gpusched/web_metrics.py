"""The web process's Prometheus metrics, served on /metrics (gpusched/views.py).

Cluster-wide numbers are read from the database at scrape time by `ClusterCollector`, so every
web replica reports the same cluster and nothing has to be kept in step. They are aggregates only
(counts per cluster queue, phase, state or telemetry source): no tenant, workload or node names.

Outbox lag is this process's: the dashboard tailer of each web process reads the outbox itself
(dashboard/tailer.py). `gpusched_outbox_lag_events` is the newest event id minus the id the
tailer has delivered to every view it keeps (ids, so an upper bound on events: a rolled-back
transaction leaves a gap), and `gpusched_outbox_lag_seconds` the age of the oldest event not yet
delivered. Both are 0 when no dashboard is open: nothing waits for those events.

Request latency is this process's too (`request_metrics`, the first middleware): per route, the URL
pattern a request matched (`static` for collected files, `unmatched` for unknown paths), so the
label has as many values as the URL configuration has patterns, never one per object.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError
from django.db.models import Count, Max, Min, Q, Sum
from django.http import HttpRequest, HttpResponseBase
from django.utils import timezone
from prometheus_client import Counter as CounterMetric
from prometheus_client import Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily

from common.process_metrics import role_registry
from dashboard.tailer import Tailer
from scheduling.core.types import MILLI_PER_GPU
from scheduling.models import Allocation, ClusterQueue, Event, Gpu, LocalQueue, Node, Pod, Workload
from telemetry.models import GpuLatest, NodeTelemetry, SourceStatus

logger = logging.getLogger(__name__)


def _gauge(
    name: str, documentation: str, values: Mapping[str, float], label: str
) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=[label])
    for value_label, value in sorted(values.items()):
        family.add_metric([value_label], value)
    return family


def _counts(rows: Iterable[tuple[str, int]], keys: Iterable[str]) -> dict[str, int]:
    """Grouped counts, with a zero for each expected key that has no row."""
    counts = {str(key): 0 for key in keys}
    for key, n in rows:
        counts[key] = counts.get(key, 0) + n
    return counts


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
    return _counts(rows, values)


class ClusterCollector:
    """Queue depth, pods, nodes and GPUs, outbox lag and telemetry age, read at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        # All or nothing: a scrape that fails half-way reports the database down, not a mix.
        try:
            families = [*self._queues(), *self._cluster(), *self._outbox(), *self._telemetry()]
        except DatabaseError:
            logger.warning("/metrics: reading the database failed", exc_info=True)
            families = []
        yield GaugeMetricFamily(
            "gpusched_database_up",
            "1 if /metrics could read the database (0: the other cluster families are missing).",
            value=1 if families else 0,
        )
        yield from families

    def _queues(self) -> Iterable[GaugeMetricFamily]:
        """Per ClusterQueue: workloads waiting for admission (through their LocalQueue), pods of
        its pending or admitted workloads still waiting for a node, workloads holding quota."""
        names = list(ClusterQueue.objects.values_list("name", flat=True))
        route = {
            (namespace, name): cluster_queue
            for namespace, name, cluster_queue in LocalQueue.objects.values_list(
                "namespace", "name", "cluster_queue__name"
            )
        }
        pending_workloads = dict.fromkeys(names, 0)
        for namespace, queue, n in (
            Workload.objects.filter(state=Workload.State.PENDING)
            .values_list("tenant__namespace", "queue_name")
            .annotate(n=Count("id"))
            .order_by()
        ):
            cluster_queue = route.get((namespace, queue))
            if cluster_queue in pending_workloads:
                pending_workloads[cluster_queue] += n
        pending_pods = dict.fromkeys(names, 0)
        for admitted_to, namespace, queue, n in (
            Pod.objects.filter(phase=Pod.Phase.PENDING, workload__state__in=Workload.ACTIVE_STATES)
            .values_list(
                "workload__cluster_queue__name",
                "workload__tenant__namespace",
                "workload__queue_name",
            )
            .annotate(n=Count("id"))
            .order_by()
        ):
            cluster_queue = admitted_to or route.get((namespace, queue))
            if cluster_queue in pending_pods:
                pending_pods[cluster_queue] += n
        admitted = _counts(
            Workload.objects.filter(
                state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
                cluster_queue__isnull=False,
            )
            .values_list("cluster_queue__name")
            .annotate(n=Count("id"))
            .order_by(),
            names,
        )
        label = "cluster_queue"
        yield _gauge(
            "gpusched_queue_pending_workloads",
            "Workloads waiting for admission, per ClusterQueue.",
            pending_workloads,
            label,
        )
        yield _gauge(
            "gpusched_queue_pending_pods",
            "Pods of active workloads waiting for a node, per ClusterQueue.",
            pending_pods,
            label,
        )
        yield _gauge(
            "gpusched_queue_admitted_workloads",
            "Workloads holding quota (admitted or running), per ClusterQueue.",
            admitted,
            label,
        )

    def _cluster(self) -> Iterable[GaugeMetricFamily]:
        workloads = _counts_by(Workload, "state", Workload.ACTIVE_STATES)
        yield _gauge("gpusched_workloads", "Active workloads, by state.", workloads, "state")
        pods = _counts_by(Pod, "phase", Pod.ACTIVE_PHASES)
        yield _gauge(
            "gpusched_pods",
            "Active pods, by phase (Pending: waiting for a node; Bound, Running: placed).",
            pods,
            "phase",
        )
        oldest = Pod.objects.filter(
            phase=Pod.Phase.PENDING, workload__state__in=Workload.ACTIVE_STATES
        ).aggregate(created=Min("created_at"))["created"]
        yield GaugeMetricFamily(
            "gpusched_pods_pending_oldest_age_seconds",
            "Age of the oldest pod of an active workload still waiting for a node (0: none waits).",
            value=_age(oldest) if oldest else 0.0,
        )
        cordoned = Counter(Node.objects.values_list("cordoned", flat=True))
        yield _gauge(
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

    def _outbox(self) -> Iterable[GaugeMetricFamily]:
        head = Event.objects.aggregate(newest=Max("id"))["newest"] or 0
        yield GaugeMetricFamily(
            "gpusched_outbox_head_event_id", "Id of the newest outbox event.", value=head
        )
        delivered = min(Tailer.read_up_to(), default=head)
        oldest = (
            Event.objects.filter(id__gt=delivered).order_by("id").values_list("created_at").first()
        )
        yield GaugeMetricFamily(
            "gpusched_outbox_lag_events",
            "Newest outbox id minus the id this process's dashboard tailer has delivered.",
            value=max(head - delivered, 0),
        )
        yield GaugeMetricFamily(
            "gpusched_outbox_lag_seconds",
            "Age of the oldest outbox event this process's dashboard tailer has not delivered.",
            value=_age(oldest[0]) if oldest else 0.0,
        )

    def _telemetry(self) -> Iterable[GaugeMetricFamily]:
        newest = {
            source: _age(sampled_at)
            for source, sampled_at in GpuLatest.objects.values_list("source")
            .annotate(newest=Max("sampled_at"))
            .order_by()
        }
        yield _gauge(
            "gpusched_telemetry_sample_age_seconds",
            "Seconds since the newest GPU sample, per telemetry source.",
            newest,
            "source",
        )
        statuses = list(SourceStatus.objects.all())
        yield _gauge(
            "gpusched_telemetry_source_last_success_age_seconds",
            "Seconds since the source last delivered data (+Inf: never).",
            {s.name: _age(s.last_success_at) for s in statuses},
            "source",
        )
        yield _gauge(
            "gpusched_telemetry_source_consecutive_failures",
            "Ingest cycles in a row that got no data from the source.",
            {s.name: s.consecutive_failures for s in statuses},
            "source",
        )
        states = _counts(
            NodeTelemetry.objects.values_list("state").annotate(n=Count("id")).order_by(),
            (NodeTelemetry.State.FRESH, NodeTelemetry.State.STALE),
        )
        yield _gauge(
            "gpusched_telemetry_nodes", "Nodes reporting telemetry, by freshness.", states, "state"
        )


def _age(moment: datetime | None) -> float:
    if moment is None:
        return float("inf")
    return max((timezone.now() - moment).total_seconds(), 0.0)


registry = role_registry()
registry.register(ClusterCollector())

websocket_clients = Gauge(
    "gpusched_websocket_clients",
    "Dashboard websockets connected to this process, by view.",
    ["view"],
    registry=registry,
)

http_request_seconds = Histogram(
    "gpusched_http_request_duration_seconds",
    "Web requests from the first middleware to the response, by route (the URL pattern).",
    ["route"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
    registry=registry,
)
http_requests = CounterMetric(
    "gpusched_http_requests",
    "Web requests by route, method and status code.",
    ["route", "method", "code"],
    registry=registry,
)

Handler = Callable[[HttpRequest], HttpResponseBase]


def route_of(request: HttpRequest) -> str:
    match = request.resolver_match
    if match is not None:
        return match.route or match.view_name
    return "static" if request.path.lstrip("/").startswith(settings.STATIC_URL) else "unmatched"


# Any token is a method to HTTP: the label keeps the standard ones, so a client cannot grow it.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _observe(request: HttpRequest, response: HttpResponseBase, seconds: float) -> None:
    route = route_of(request)
    method = request.method if request.method in METHODS else "other"
    http_request_seconds.labels(route=route).observe(seconds)
    http_requests.labels(route=route, method=method, code=str(response.status_code)).inc()


def request_metrics(get_response: Handler) -> Handler:
    """Times every request (the chain runs on the request's thread: gpusched/request_handler.py)."""

    def timed(request: HttpRequest) -> HttpResponseBase:
        started = time.perf_counter()
        response = get_response(request)
        _observe(request, response, time.perf_counter() - started)
        return response

    return timed
