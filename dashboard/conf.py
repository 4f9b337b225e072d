"""Dashboard settings, each overridable by a Django setting of the same name."""

from django.conf import settings

DEFAULTS: dict[str, float] = {
    # How often an idle tailer looks for new outbox rows.
    "DASHBOARD_POLL_SECONDS": 0.025,
    # After pushing a delta, wait this long before the next one: a burst becomes one delta.
    "DASHBOARD_COALESCE_SECONDS": 0.1,
    # A client whose last event id is further behind than this gets a fresh snapshot.
    "DASHBOARD_MAX_BEHIND_EVENTS": 1000,
    # Deltas kept per view for clients that reconnect (resume from their last event id).
    "DASHBOARD_BUFFERED_DELTAS": 512,
    # Outbox rows read per step; a view that falls a whole batch behind is rebuilt instead.
    "DASHBOARD_EVENT_BATCH": 2000,
    # A view nobody watches is kept this long (for reconnects), then dropped.
    "DASHBOARD_LINGER_SECONDS": 60.0,
}


def value(name: str) -> float:
    return float(getattr(settings, name, DEFAULTS[name]))
