"""What one scheduling cycle (scheduling.worker.cycle) did: the commands print it and its metrics
count it."""

from __future__ import annotations

from dataclasses import dataclass, field

# The phases of a cycle, in order (CycleReport's `<phase>_s`): together the whole cycle but for its
# bookkeeping; the estimated starts run after it, every few seconds (`estimate_s`).
PHASES = ("sync", "admission", "reclaim", "select", "snapshot", "schedule", "commit", "waiting")


@dataclass
class CycleReport:
    side: str = ""
    leading: bool = False
    synced: bool = False  # the side's view was complete (Kubernetes: informers listed)
    attempted: int = 0
    bound: int = 0
    conflicts: int = 0  # binds the database refused
    requeued: int = 0  # binds the side refused (the pod goes back to the queue)
    unschedulable: int = 0
    admitted: int = 0
    preempted: int = 0  # workloads evicted to make room (quota or nodes)
    pods_ready_timeouts: int = 0  # admitted workloads evicted: pods not placed in time
    reclaimed: int = 0  # workloads evicted from lent capacity their owners took back
    evictions_refused: int = 0  # pods the side would not evict now (a disruption budget)
    gangs_bound: int = 0
    reserved: int = 0  # gangs and large pods holding nodes they wait for
    reservations_released: int = 0
    estimated: int = 0  # waiting workloads whose start was estimated
    reconciled: int = 0
    reported: int = 0  # reports the side sent out (Kubernetes: events and conditions)
    quarantined: int = 0  # nodes whose recorded state contradicts their capacity
    more: bool = False
    # The cycle passed its deadline (SCHEDULER_CYCLE_DEADLINE_S) and left work for the next one:
    # pods placed in the snapshot but not committed (they wait, pending, for the next cycle), or
    # the whole batch, not taken because admission, reclaim or node actions used the time.
    over_deadline: bool = False
    deferred: int = 0
    # Seconds per phase (PHASES).
    sync_s: float = 0.0  # leadership, the side's sync, the cluster state's refresh and quarantine
    admission_s: float = 0.0
    reclaim_s: float = 0.0
    select_s: float = 0.0  # reading the next batch of pending pods, in queue order
    snapshot_s: float = 0.0
    schedule_s: float = 0.0
    commit_s: float = 0.0  # evictions, the commit and the bind
    waiting_s: float = 0.0  # why the others wait (step 11)
    estimate_s: float = 0.0  # estimated starts (every few seconds, not every cycle)
    side_counts: dict[str, int] = field(default_factory=dict)

    def phase_seconds(self) -> dict[str, float]:
        return {phase: getattr(self, f"{phase}_s") for phase in PHASES}
