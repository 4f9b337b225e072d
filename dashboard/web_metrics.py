"""The dashboard's figures on the web process's /metrics (registered in gpusched/web_metrics.py).

Outbox lag is this process's: the dashboard tailer of each web process reads the outbox itself
(dashboard/tailer.py). `gpusched_outbox_lag_events` is the newest event id minus the id the
tailer has delivered to every view it keeps (ids, so an upper bound on events: a rolled-back
transaction leaves a gap), and `gpusched_outbox_lag_seconds` the age of the oldest event not yet
delivered. Both are 0 when no dashboard is open: nothing waits for those events.
`gpusched_websocket_clients` counts the dashboard's sockets (dashboard/consumers.py).
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Max
from prometheus_client import Gauge
from prometheus_client.core import GaugeMetricFamily

from common.metric_families import age
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
