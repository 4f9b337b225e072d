"""What the scheduler predicts about waiting work (issue 18): reservations it gave up, and the
run-time predictions and estimated starts it computed, recorded for the API to read."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from scheduling import events
from scheduling.bulk import update_rows
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


@dataclass(frozen=True)
class WorkloadEstimate:
    workload_id: int
    runtime_p50_s: float | None
    runtime_p90_s: float | None
    runtime_basis: str
    start_p50: datetime | None
    start_p90: datetime | None
    start_unknown_reason: str  # when start_p50 is None


ESTIMATE_FIELDS = [
    "runtime_p50_s",
    "runtime_p90_s",
    "runtime_basis",
    "start_p50",
    "start_p90",
    "start_unknown_reason",
    "estimated_at",
]


def workload_estimates_record(*, estimates: Sequence[WorkloadEstimate], now: datetime) -> int:
    """Record the latest predictions of waiting workloads; those no longer waiting keep what they
    had (the API shows estimates of waiting work only). No event: they change every few seconds
    and nothing reacts to them."""
    if not estimates:
        return 0
    rows = Workload.objects.in_bulk([e.workload_id for e in estimates])
    changed = []
    for e in estimates:
        row = rows.get(e.workload_id)
        if row is None:
            continue
        row.runtime_p50_s, row.runtime_p90_s = e.runtime_p50_s, e.runtime_p90_s
        row.runtime_basis = e.runtime_basis[:256]
        row.start_p50, row.start_p90 = e.start_p50, e.start_p90
        row.start_unknown_reason = e.start_unknown_reason[:256]
        row.estimated_at = now
        changed.append(row)
    update_rows(changed, ESTIMATE_FIELDS)
    return len(changed)
