"""What the scheduler predicts about waiting work (issue 18): reservations it gave up, and the
run-time predictions and estimated starts it computed, recorded for the API to read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from django.db import transaction

from scheduling import events
from scheduling.models import Workload


def reservations_released(
    *, released: Sequence[tuple[Workload, tuple[str, ...], str]], now: datetime
) -> None:
    """An event per reservation released, naming the nodes and why."""
    if not released:
        return
    with transaction.atomic():
        events.publish(
            *(
                events.ReservationReleased(
                    uid=str(w.uid),
                    tenant=w.tenant.name,
                    name=w.name,
                    nodes=list(nodes),
                    reason=reason,
                )
                for w, nodes, reason in released
            )
        )
