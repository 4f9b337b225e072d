"""Feeds what DCGM measures into the scheduler: each tenant's usage ratio sets the expected load of
its new pods, and the snapshot's per-GPU load is refreshed from telemetry (with the just-placed
correction of scheduling.core.load). Without telemetry nothing changes: pods are expected to use
what they request and LoadAware scores neutral."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from django.utils import timezone

from scheduling.core.load import GpuMeasurement, RecentPlacement, estimated_load
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import MILLI_PER_GPU, Placement, PodRequest
from scheduling.models import Allocation
from scheduling.selectors.efficiency import usage_ratios
from scheduling.worker.cluster_state import ClusterState
from telemetry.selectors import freshness, gpu_loads

REFRESH_EVERY_S = 15.0  # dcgm-exporter is scraped every 15 s by default (wire-formats.md §1)
RATIOS_EVERY_S = 60.0
RECENT_S = 60.0  # Trimaran counts pods bound in the last 60 s at their prediction


class LoadFeed:
    def __init__(
        self,
        *,
        refresh_every_s: float = REFRESH_EVERY_S,
        ratios_every_s: float = RATIOS_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], datetime] = timezone.now,
    ) -> None:
        self.clock = clock  # the worker's: the usage window ends now, simulated or not
        self.refresh_every_s = refresh_every_s
        self.ratios_every_s = ratios_every_s
        self.monotonic = monotonic
        self._ratios: dict[str, float] = {}
        self._ratios_at = -float("inf")
        self._refreshed_at = -float("inf")
        self._snapshot_id = 0

    def usage_ratios(self) -> dict[str, float]:
        """Each tenant's p95 used / requested GPUs (refreshed every ratios_every_s)."""
        if self.monotonic() - self._ratios_at > self.ratios_every_s:
            self._ratios = usage_ratios(now=self.clock())
            self._ratios_at = self.monotonic()
        return self._ratios

    def estimate(self, request: PodRequest) -> PodRequest:
        """The request with the load its tenant's pods really put on a GPU, when known."""
        ratio = self.usage_ratios().get(request.tenant, 1.0)
        if ratio >= 1.0 or not request.wants_gpu:
            return request
        return replace(request, load_estimate=ratio * request.expected_load)

    def refresh(self, state: ClusterState, now: datetime) -> None:
        """Measured load into the snapshot, every refresh_every_s and whenever it was rebuilt."""
        rebuilt = id(state.snapshot) != self._snapshot_id
        if not rebuilt and self.monotonic() - self._refreshed_at < self.refresh_every_s:
            return
        measurements = {
            key: GpuMeasurement(load.busy, load.age_seconds)
            for key, load in gpu_loads(now=now).items()
            if load.busy is not None
        }
        recent_rows = Allocation.objects.filter(
            active=True, bound_at__gte=now - timedelta(seconds=RECENT_S)
        ).values_list("pod__uid", "bound_at")
        snapshot = state.snapshot
        recent = []
        for uid, bound_at in recent_rows:
            held = state.held.get(str(uid))
            if held is None:
                continue
            request, placement = held
            recent.append(
                RecentPlacement(
                    placement.node,
                    placement.gpu_indices,
                    request.expected_load,
                    measured=self._measured_share(snapshot, placement, measurements, now, bound_at),
                )
            )
        load, age = estimated_load(snapshot, measurements, recent)
        snapshot.refresh_load(load, age, freshness().total_seconds())
        self._snapshot_id = id(state.snapshot)
        self._refreshed_at = self.monotonic()

    @staticmethod
    def _measured_share(
        snapshot: ClusterSnapshot,
        placement: Placement,
        measurements: Mapping[tuple[str, int], GpuMeasurement],
        now: datetime,
        bound_at: datetime | None,
    ) -> float:
        """What the last reading of the pod's GPUs already shows of it: nothing if it was taken
        before the pod was bound, else the pod's part of what its GPUs were busy with (its share
        of what the GPU's holders hold). dcgm-exporter reports a shared GPU as a whole, so a share
        is as much as can be told apart."""
        i = snapshot.index.get(placement.node)
        if i is None or bound_at is None or not placement.gpu_indices:
            return 0.0
        shares = []
        for gpu in placement.gpu_indices:
            reading = measurements.get((placement.node, gpu))
            if reading is None or now - timedelta(seconds=reading.age_s) < bound_at:
                return 0.0
            held = MILLI_PER_GPU - max(0, int(snapshot.gpu_free[i, gpu]))
            shares.append(
                reading.busy * placement.milli_per_gpu / max(held, placement.milli_per_gpu)
            )
        return min(shares)
