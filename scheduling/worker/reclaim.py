"""Reclaim in the worker: what each shared GPU's owners may lend, from the database's holders and
DCGM's busy readings, into the snapshot; and the lent pods whose owners want their GPU back.

The rules are scheduling.core.reclaim's. Settings (Django settings of the same name):
- RECLAIM_MARGIN (0.2): lend what is allocated beyond p95 x 1.2;
- RECLAIM_GRACE_SECONDS (120): how long a GPU may stay over-lent before lent pods are evicted;
- RECLAIM_WINDOW_SECONDS (1800): the p95 window, long enough to see an owner's periodic bursts;
- RECLAIM_MIN_OBSERVED_SECONDS (300): an owner placed more recently has not been measured yet, so
  its GPU lends nothing.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.conf import settings

from scheduling.core.reclaim import (
    DEFAULT_GRACE_S,
    DEFAULT_MARGIN,
    GpuKey,
    GpuLending,
    LentPod,
    Reclaim,
    ReclaimTracker,
    lendable_milli,
    owner_use,
)
from scheduling.core.types import MILLI_PER_GPU, ServiceClass, SharingMode
from scheduling.models import GpuAssignment
from scheduling.worker.cluster_state import ClusterState
from telemetry.selectors import gpu_busy_p95

REFRESH_EVERY_S = 15.0  # as often as dcgm-exporter is scraped


def _setting(name: str, default: float) -> float:
    return float(getattr(settings, name, default))


@dataclass
class _Holders:
    owner_milli: int = 0
    online: bool = False
    owners: list[str] = field(default_factory=list)
    newest_owner_bound: datetime | None = None
    lent: list[LentPod] = field(default_factory=list)


class ReclaimFeed:
    def __init__(
        self,
        *,
        refresh_every_s: float = REFRESH_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled  # off: nothing is lent (request-only scheduling)
        self.refresh_every_s = refresh_every_s
        self.monotonic = monotonic
        self.margin = _setting("RECLAIM_MARGIN", DEFAULT_MARGIN)
        self.window = timedelta(seconds=_setting("RECLAIM_WINDOW_SECONDS", 1800.0))
        self.min_observed = timedelta(seconds=_setting("RECLAIM_MIN_OBSERVED_SECONDS", 300.0))
        self.tracker = ReclaimTracker(
            grace_s=_setting("RECLAIM_GRACE_SECONDS", DEFAULT_GRACE_S), margin=self.margin
        )
        # What the owners of a GPU used while it lent nothing, per GPU and set of owners: DCGM
        # cannot tell owners from borrowers on a time-sliced GPU afterwards.
        self._alone: dict[tuple[GpuKey, frozenset[str]], float] = {}
        self._refreshed_at = -float("inf")
        self._snapshot_id = 0

    def refresh(self, state: ClusterState, now: datetime) -> list[Reclaim]:
        """Every refresh_every_s, and whenever the snapshot was rebuilt: what each GPU may lend,
        into the snapshot; returns the lent pods to evict."""
        if not self.enabled:
            return []
        rebuilt = id(state.snapshot) != self._snapshot_id
        due = self.monotonic() - self._refreshed_at >= self.refresh_every_s
        if not (rebuilt or due):
            return []
        self._refreshed_at, self._snapshot_id = self.monotonic(), id(state.snapshot)
        gpus = self.lendings(state, now)
        snapshot = state.snapshot
        lendable = np.zeros_like(snapshot.gpu_lendable)
        for (node, index), gpu in gpus.items():
            row = snapshot.index.get(node)
            # A GPU the node no longer reports (kept as absent) has no column to lend from.
            if row is not None and index < snapshot.gpu_count[row]:
                lendable[row, index] = lendable_milli(gpu, self.margin)
        snapshot.refresh_reclaimable(lendable)
        return self.tracker.victims(gpus, now.timestamp())

    def lendings(self, state: ClusterState, now: datetime) -> dict[GpuKey, GpuLending]:
        """Every shared GPU that holds something, as reclaim sees it."""
        holders: dict[GpuKey, _Holders] = defaultdict(_Holders)
        # Plain rows of the columns used: this reads every shared GPU's holders, each refresh.
        rows = GpuAssignment.objects.filter(
            active=True,
            mig_slot__isnull=True,
            gpu__sharing__in=[m.value for m in SharingMode if m.shareable],
        ).values_list(
            "milli",
            "reclaimed",
            "gpu__index",
            "gpu__node__name",
            "allocation__bound_at",
            "allocation__pod__uid",
            "allocation__pod__workload__service_class",
        )
        online = ServiceClass.ONLINE.value
        for milli, reclaimed, index, node, bound, pod_uid, service_class in rows:
            held = holders[(node, index)]
            bound_at, uid = bound or now, str(pod_uid)
            if reclaimed:
                request = state.held.get(uid)
                expected = request[0].expected_load if request else milli / MILLI_PER_GPU
                held.lent.append(LentPod(uid, milli, expected, bound_at.timestamp()))
            elif service_class == online:
                held.online = True
            else:
                held.owner_milli += milli
                held.owners.append(uid)
                if held.newest_owner_bound is None or bound_at > held.newest_owner_bound:
                    held.newest_owner_bound = bound_at
        busy = gpu_busy_p95(window=self.window, now=now)
        result: dict[GpuKey, GpuLending] = {}
        alone: dict[tuple[GpuKey, frozenset[str]], float] = {}
        for key, held in holders.items():
            owners = (key, frozenset(held.owners))
            measured = busy.get(key)
            if not held.lent and measured is not None:
                alone[owners] = measured
            observed = (
                held.newest_owner_bound is not None
                and now - held.newest_owner_bound >= self.min_observed
            )
            used = owner_use(measured, tuple(held.lent), self._alone.get(owners))
            result[key] = GpuLending(
                owner_milli=held.owner_milli,
                online=held.online,
                owner_used=used if observed else None,
                lent=tuple(held.lent),
            )
        # Keep what is known of GPUs still lending; forget owners that are gone.
        self._alone = {k: v for k, v in self._alone.items() if k[0] in result} | alone
        return result
