"""Page data for the dashboard (HackSoft selectors), one module per page: plain JSON-ready dicts,
read in full for a snapshot or for a few keys for a delta. Only reads; every query is bounded by
the cluster size or by an explicit window.

Docs are keyed the way the browser keeps them (node name, decision id, pod uid, tenant name), so a
delta is "these keys now look like this" and the same code builds both a snapshot and a delta.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db.models import Max

from scheduling.models import Event

Doc = dict[str, Any]


def head_event_id() -> int:
    """The newest committed outbox id: a state read after this includes every change up to it."""
    return Event.objects.aggregate(newest=Max("id"))["newest"] or 0


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
