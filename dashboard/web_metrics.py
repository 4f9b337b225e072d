"""The dashboard's figures on the web process's /metrics (registered in gpusched/web_metrics.py).

Outbox lag is this process's: the dashboard tailer of each web process reads the outbox itself
(dashboard/tailer.py). `gpusched_outbox_lag_events` is the newest event id minus the id the
tailer has delivered to every view it keeps (ids, so an upper bound on events: a rolled-back
transaction leaves a gap), and `gpusched_outbox_lag_seconds` the age of the oldest event not yet
delivered. Both are 0 when no dashboard is open: nothing waits for those events.
`gpusched_websocket_clients` counts the dashboard's sockets (dashboard/consumers.py).
`gpusched_gpus_stranded` and `gpusched_nodes_stranded` are the Cluster page's stranded count
(dashboard.selectors.cluster.cluster_stranded), judged on a snapshot read at most
STRANDED_MAX_AGE_S (default 10 s) before the scrape: the judgement reads the whole cluster.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Max
from prometheus_client import Gauge
from prometheus_client.core import GaugeMetricFamily

from common.metric_families import age
from dashboard.selectors.cluster import cluster_stranded
from dashboard.tailer import Tailer
from scheduling.models import Event

websocket_clients = Gauge(
    "gpusched_websocket_clients",
    "Dashboard websockets connected to this process, by view.",
    ["view"],
    registry=None,
)


class OutboxCollector:
    """The outbox's head and how far this process's tailer is behind it, read at scrape time."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
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
            value=age(oldest[0]) if oldest else 0.0,
        )


class StrandedCollector:
    """The Cluster page's stranded GPUs, judged at most STRANDED_MAX_AGE_S before the scrape."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: tuple[float, dict[str, int]] | None = None  # (monotonic time, the doc)

    def _stranded(self) -> dict[str, int]:
        max_age = float(getattr(settings, "STRANDED_MAX_AGE_S", 10.0))
        with self._lock:
            if self._read is not None and time.monotonic() - self._read[0] < max_age:
                return self._read[1]
        doc = cluster_stranded()  # outside the lock: a slow read holds no other scrape back
        with self._lock:
            self._read = (time.monotonic(), doc)
        return doc

    def collect(self) -> Iterator[GaugeMetricFamily]:
        doc = self._stranded()
        yield GaugeMetricFamily(
            "gpusched_gpus_stranded",
            "Whole GPUs free on schedulable nodes where no waiting GPU pod can go (the Cluster "
            "page's stranded count).",
            value=doc["stranded"],
        )
        yield GaugeMetricFamily(
            "gpusched_nodes_stranded",
            "Schedulable nodes with stranded GPUs.",
            value=doc["stranded_nodes"],
        )
