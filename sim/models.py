"""What the harness keeps of its own in the database: how the simulated clusters run each pod they
submitted. The product's schema knows nothing of it (a pod row carries no simulation)."""

from __future__ import annotations

from datetime import datetime

from django.db import models

from scheduling.models import Pod


class PodSimulation(models.Model):
    """How the simulated cluster runs one pod: when its workload arrived in the trace, how long it
    runs in simulated seconds (0: until it is stopped), how busy it keeps its GPUs (a utilization
    profile, sim/utilization.py, its field names), and the simulated seconds it lost to contention
    on over-subscribed GPUs since it last started (an evicted pod starts over)."""

    # No database constraint: the product's processes (the harness not installed) may delete
    # pods, and a constraint they do not know of would refuse it.
    pod = models.OneToOneField(
        Pod,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="sim",
        db_constraint=False,
    )
    arrival_s = models.FloatField(null=True, blank=True)
    duration_s = models.FloatField(default=0.0)
    utilization = models.JSONField(default=dict, blank=True)
    lost_s = models.FloatField(default=0.0)
    # The start lost_s was lost since (the pod's started_at then): a later start has lost nothing.
    lost_since = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"simulation of pod {self.pod_id}"

    def lost_in(self, started_at: datetime | None) -> float:
        """Simulated seconds lost since the pod's start `started_at`."""
        return self.lost_s if started_at is not None and self.lost_since == started_at else 0.0

    def lose(self, seconds: float, started_at: datetime | None) -> None:
        self.lost_s = self.lost_in(started_at) + seconds
        self.lost_since = started_at
