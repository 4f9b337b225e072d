"""The database side: the embedded simulator and the tenants' REST API write straight into the
database, so there is nothing to sync in, a committed placement is already real, and an evicted
pod is gone at once. Leadership is a lease row (services.lease_acquire)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from scheduling import services
from scheduling.core.scheduler import Decision, Framework
from scheduling.models import Pod
from scheduling.worker.cycle import SchedulingCycle, default_identity
from scheduling.worker.side import (
    Answered,
    Leadership,
    NodeAnswer,
    PodEviction,
    SideSync,
    Verdict,
    Waiting,
)

LEASE_NAME = "gpusched-scheduler"


class DatabaseSide:
    name = "database"
    evictions_free_at_once = True
    tells_pods = False
    queues_admit = True

    def sync(self, now: datetime) -> SideSync:
        return SideSync()

    def placeable(self, pods: Sequence[Pod]) -> list[Pod]:
        return list(pods)

    def evict(
        self,
        evictions: Sequence[PodEviction],
        now: datetime,
        said: dict[str, str] | None = None,
    ) -> dict[str, Verdict]:
        return {str(e.pod.uid): Verdict.GONE for e in evictions}

    def cordon(self, node: str, cordoned: bool) -> NodeAnswer:
        return NodeAnswer(200, cordoned)  # the database is the cluster: the admin's write is it

    def bind(self, placed: Sequence[tuple[Pod, Decision]], now: datetime) -> Answered:
        return Answered()  # committed is real

    def report(self, waiting: Sequence[Waiting], now: datetime) -> int:
        return 0  # the database records (decisions, reasons) are all there is to tell


@dataclass
class DatabaseLease:
    """One leader among the replicas sharing the lease row: a conditional UPDATE, so two can
    never both win; a standby takes over once the holder stops renewing."""

    holder: str
    name: str = LEASE_NAME
    duration_s: float = 15.0
    leading: bool = False

    def lead(self, now: datetime) -> Leadership:
        won = services.lease_acquire(
            name=self.name, holder=self.holder, duration_s=self.duration_s, now=now
        )
        new_term = won and not self.leading
        self.leading = won
        return Leadership(won, new_term)

    def stand_down(self) -> None:
        services.lease_release(name=self.name, holder=self.holder)
        self.leading = False


def database_cycle(
    framework: Framework,
    *,
    identity: str = "",
    lease_name: str = LEASE_NAME,
    lease_duration_s: float = 15.0,
    **options: Any,
) -> SchedulingCycle:
    """The scheduling cycle for the database side (what `runscheduler` runs)."""
    identity = identity or default_identity()
    return SchedulingCycle(
        framework,
        DatabaseSide(),
        DatabaseLease(identity, lease_name, lease_duration_s),
        identity=identity,
        **options,
    )
