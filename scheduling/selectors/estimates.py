"""What the scheduling cycle last estimated for a waiting workload (scheduling.worker.estimates),
read one way: the API's workload status, its why-pending and the dashboard's queue page all show
this one read, so a tenant sees the same estimated start and the same basis wherever they look."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from scheduling.models import Workload

WAITING = (Workload.State.PENDING, Workload.State.ADMITTED)


@dataclass(frozen=True)
class StartEstimate:
    p50: datetime | None  # None: unknown, and `unknown_reason` says why
    p90: datetime | None
    unknown_reason: str
    runtime_p50_s: float | None  # the run time predicted for the workload
    runtime_p90_s: float | None
    runtime_basis: str  # what that comes from: "learned: ...", "prior: ...", or none yet
    estimated_at: datetime

    @property
    def basis(self) -> str:
        """What a known start rests on (the run times' basis), else why it is unknown."""
        return self.runtime_basis if self.p50 is not None else self.unknown_reason


def start_estimate(workload: Workload) -> StartEstimate | None:
    """The workload's latest estimate; None when it is not waiting (an estimate is of a start
    still to come) or has not been estimated yet."""
    if workload.state not in WAITING or workload.estimated_at is None:
        return None
    return StartEstimate(
        p50=workload.start_p50,
        p90=workload.start_p90,
        unknown_reason=workload.start_unknown_reason,
        runtime_p50_s=workload.runtime_p50_s,
        runtime_p90_s=workload.runtime_p90_s,
        runtime_basis=workload.runtime_basis,
        estimated_at=workload.estimated_at,
    )
