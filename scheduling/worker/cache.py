"""The scheduler's view of the cluster, kept current from the outbox instead of rebuilt every cycle.

kube-scheduler keeps an informer-fed cache and snapshots it per cycle; here the outbox is the feed.
A rebuild reads the newest event id first and the state second, so every change after that id is
either already in the state or still ahead in the outbox. Applying an event is idempotent per pod
(a bind of a pod already held, or a release of one not held, changes nothing), so that overlap is
harmless. A node change, and a periodic resync, rebuild from scratch.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import replace

from django.db.models import Max

from scheduling import events
from scheduling.core.snapshot import OverCommitError
from scheduling.core.types import Placement, PodRequest
from scheduling.events import (
    AllocationPromoted,
    AllocationReleased,
    EventTypes,
    GpusObserved,
    NodeChanged,
    PodBound,
    UnknownEvent,
)
from scheduling.models import Event
from scheduling.worker import cluster_state
from scheduling.worker.cluster_state import ClusterState

RESYNC_S = 300.0


class ClusterCache:
    # What moves the snapshot: a node change rebuilds it (as an unknown event does), but for a
    # cordon set or lifted, applied in place; so do GPU ids corrected to what pods really hold
    # (rare); the rest of the outbox concerns queues and pages, not what nodes hold.
    REBUILDS_ON: EventTypes = frozenset({NodeChanged, GpusObserved, UnknownEvent})
    # A release on a quarantined node may have made it consistent: that also rebuilds.
    HANDLES: EventTypes = frozenset({AllocationReleased, AllocationPromoted, PodBound})
    IGNORES: EventTypes = frozenset(events.EVENT_TYPES.values()) - REBUILDS_ON - HANDLES

    def __init__(
        self,
        *,
        resync_s: float = RESYNC_S,
        monotonic: Callable[[], float] = time.monotonic,
        freeze_long_lived: bool = False,
    ) -> None:
        self.resync_s = resync_s
        # The worker processes (runscheduler, runkube) set it: see _rebuild.
        self.freeze_long_lived = freeze_long_lived
        self.monotonic = monotonic
        self._state: ClusterState | None = None
        self._cursor = 0
        self._built_at = 0.0
        self.rebuilds = 0

    def state(self) -> ClusterState:
        """The cluster as of the newest committed event."""
        if self._state is None or self.monotonic() - self._built_at > self.resync_s:
            return self._rebuild()
        if not self._apply_new_events(self._state):
            return self._rebuild()
        return self._state

    def catch_up(self) -> None:
        """Apply what was committed since the last read (say, by a service the worker just
        called) to the current state, in place; a change that needs a rebuild waits for the next
        state()."""
        if self._state is not None and not self._apply_new_events(self._state):
            self._state = None

    def _apply_new_events(self, state: ClusterState) -> bool:
        """False when an event needs a rebuild."""
        new = events.read_after(self._cursor)
        if any(_rebuilds(event, state) for _, event in new):
            return False
        if state.quarantined and any(
            isinstance(event, AllocationReleased) and event.node in state.quarantined
            for _, event in new
        ):
            return False
        try:
            self._apply(state, new)
        except OverCommitError:
            # Applied one by one, the events disagree with the snapshot (a lent share promoted
            # before the release that made room for it was read): the database is consistent,
            # so read it again rather than fail every cycle from here on.
            return False
        return True

    def _apply(self, state: ClusterState, new: list[tuple[int, events.EventPayload]]) -> None:
        bound_elsewhere: list[str] = []
        for event_id, event in new:
            self._cursor = event_id
            if isinstance(event, NodeChanged):  # cordon only (_rebuilds)
                state.snapshot.cordon(event.node, event.cordoned)
            elif isinstance(event, AllocationReleased):
                held = state.held.pop(event.pod_uid, None)
                if held is not None:
                    state.snapshot.forget(*held)
            elif isinstance(event, AllocationPromoted):
                held = state.held.get(event.pod_uid)
                if held is not None and held[1].reclaimed:
                    request, lent = held
                    promoted = replace(lent, reclaimed=False)
                    # Keep its age: preemption prefers the most recently started victims.
                    sequence = state.snapshot.pods.held[request.uid].sequence
                    state.snapshot.forget(request, lent)
                    state.snapshot.assume(request, promoted)
                    state.snapshot.pods.renumber(request.uid, sequence)
                    state.held[request.uid] = (request, promoted)
            elif isinstance(event, PodBound) and event.uid not in state.held:
                bound_elsewhere.append(event.uid)
        if bound_elsewhere:  # another writer bound these (a second scheduler): load and hold them
            for request, placement in cluster_state.active_placements(pod_uids=bound_elsewhere):
                if request.uid not in state.held:
                    state.snapshot.assume(request, placement)
                    state.held[request.uid] = (request, placement)

    def bound(self, request: PodRequest, placement: Placement) -> None:
        """Our own bind: the framework assumed it into the snapshot already; remember we hold it."""
        if self._state is not None:
            self._state.held[request.uid] = (request, placement)

    def unbind(self, uid: str) -> ClusterState | None:
        """Our own bind, refused by the cluster side after it was held: held no more. The state
        that held it, where the framework forgets it (None: the state was dropped since, and its
        rebuild reads the database, where the pod waits again)."""
        if self._state is None or self._state.held.pop(uid, None) is None:
            return None
        return self._state

    def freeze_kept(self) -> None:
        """With `freeze_long_lived`, what the process still holds between two cycles (the state,
        with the pods placed since the rebuild) joins what the rebuild froze: otherwise each full
        collection walks every pod placed so far again, more often as they add up (a twentieth
        of a 5,000-node run, docs/benchmarks.md). The young generations are collected first, so
        only what survives a cycle is frozen; the next rebuild unfreezes and collects it all."""
        if self.freeze_long_lived and self._state is not None:
            gc.collect(1)
            gc.freeze()

    def invalidate(self) -> None:
        self._state = None

    def _rebuild(self) -> ClusterState:
        """With `freeze_long_lived`, the new state, and whatever else the process holds by then
        (Django's and the plugins' own structures), is moved out of the garbage collector's sight
        (gc.freeze): a full collection is due whenever the objects kept since the last one add
        up to a quarter of those before, and walking a snapshot of thousands of nodes each time
        was a tenth of the worker's time at 1,000 nodes (docs/benchmarks.md). What the last
        rebuild froze is unfrozen and collected first, so the state replaced here is freed even
        where it holds reference cycles (what the first freeze keeps that was garbage already
        waits for the next rebuild); the build itself does not stop for collections."""
        self._state = None
        freezing = self.freeze_long_lived
        collecting = gc.isenabled()
        if freezing:
            if gc.get_freeze_count():
                gc.unfreeze()
                gc.collect()
            gc.disable()
        try:
            self._cursor = Event.objects.aggregate(newest=Max("id"))["newest"] or 0
            self._state = cluster_state.cluster_state()
        finally:
            if freezing and collecting:
                gc.enable()
        if freezing:
            gc.freeze()
        self._built_at = self.monotonic()
        self.rebuilds += 1
        return self._state


def _rebuilds(event: events.EventPayload, state: ClusterState) -> bool:
    if isinstance(event, NodeChanged) and event.cordon_only:
        return event.node not in state.snapshot.index
    return type(event) in ClusterCache.REBUILDS_ON
