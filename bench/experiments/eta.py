"""Estimated starts in the fair-sharing experiment, made as gpusched makes them (issue 18): run
times learnt online from the jobs that finished (scheduling.core.queueing.runtime), and the queue
replayed forward with the real core against them (scheduling.core.queueing.forecast), once with
p50 and once with p90 predictions; and how those estimates held up.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.admission import QueuedWorkload
from scheduling.core.queueing.backfill import BackfillPolicy, FairOrder, ReservationBook
from scheduling.core.queueing.forecast import Forecast, Queues, WaitingWork
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.runtime import JobShape, RuntimePredictor, spread
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import PodRequest

ETA_MIN_WAIT_S = 600.0
P50, P90 = 0.5, 0.9


@dataclass(frozen=True)
class Started:
    arrival_s: float
    started_at: float


@dataclass(frozen=True)
class EtaAccuracy:
    judged: int
    coverage: float
    median_rel_error: float | None
    p90_hit_rate: float | None


def eta_accuracy(
    jobs: Mapping[str, Started], etas: Mapping[str, tuple[float, float] | None]
) -> EtaAccuracy:
    """How the first estimated (p50, p90) start of the jobs that started after waiting at least
    10 minutes held up."""
    judged = {k: s for k, s in jobs.items() if s.started_at - s.arrival_s >= ETA_MIN_WAIT_S}
    covered = [(s, eta) for k, s in judged.items() if (eta := etas.get(k)) is not None]
    errors = [abs(eta[0] - s.started_at) / (s.started_at - s.arrival_s) for s, eta in covered]
    hits = [s.started_at <= eta[1] + 1e-6 for s, eta in covered]
    return EtaAccuracy(
        judged=len(judged),
        coverage=len(covered) / len(judged) if judged else 0.0,
        median_rel_error=statistics.median(errors) if errors else None,
        p90_hit_rate=sum(hits) / len(hits) if hits else None,
    )


class Runtimes:
    """The predictor, fed by finished jobs, and what it says of the jobs in the simulation."""

    def __init__(self) -> None:
        self.predictor = RuntimePredictor()
        self._cache: dict[tuple[str, float, float, bool], float | None] = {}

    def finished(self, shape: JobShape, duration_s: float, finished_at: float) -> None:
        self.predictor.observe(shape, duration_s, finished_at=finished_at)
        self._cache.clear()

    def total(
        self,
        key: str,
        shape: JobShape,
        q: float,
        elapsed_s: float = 0.0,
        *,
        long_run: bool = False,
    ) -> float | None:
        """Predicted total run time (quantile q) of a job that ran `elapsed_s` so far; with
        `long_run`, every finished job weighing the same (what backfill reads)."""
        bucket = (key, q, elapsed_s, long_run)
        if bucket not in self._cache:
            self._cache[bucket] = self.predictor.quantile(shape, q, elapsed_s, long_run=long_run)
        return self._cache[bucket]


@dataclass
class QueueView:
    """The simulation's state as the forecast needs it, at one moment."""

    framework: Framework
    snapshot: ClusterSnapshot
    now: float
    queues: Queues
    admitted: Sequence[AdmittedWorkload]
    unplaced: Sequence[str]  # admitted, waiting for nodes, in queue order
    pending: Mapping[str, QueuedWorkload]  # waiting for quota
    pods_of: Callable[[str], list[PodRequest]]
    shape_of: Callable[[str], JobShape]
    started_at: Callable[[str], float | None]
    owner_of: Callable[[PodRequest], str]
    book: ReservationBook | None  # None: the policy does not reserve
    horizon_s: float
    fair_order: FairOrder | None = None  # the order reservations follow


def forecast(view: QueueView, runtimes: Runtimes) -> dict[str, tuple[float, float] | None]:
    """Per waiting job: the estimated (p50, p90) start, or None (unknown)."""
    runs = {}
    for run in (P50, P90):
        # The p50 run ends each job at its own quantile of its predicted run time (spread):
        # the median start, as many ends come, not the start were every job to end at its
        # median; the p90 run ends every job at its p90 (an upper bound that holds).
        def q_of(key: str, run: float = run) -> float:
            return spread(key) if run == P50 else P90

        held_ends: dict[str, float | None] = {}
        owners: dict[str, str] = {}
        for uid, held in view.snapshot.pods.held.items():
            key = view.owner_of(held.pod)
            owners[uid] = key
            started = view.started_at(key)
            total = (
                None
                if started is None
                else runtimes.total(key, view.shape_of(key), q_of(key), view.now - started)
            )
            held_ends[uid] = None if total is None or started is None else started + total
        order = [*view.unplaced, *sorted(view.pending, key=lambda k: view.pending[k].created_at)]
        waiting = [
            WaitingWork(
                key,
                tuple(view.pods_of(key)),
                view.pending.get(key),
                runtimes.total(key, view.shape_of(key), q_of(key)),
            )
            for key in order
        ]
        real = view.book  # the replay gets its own copy: the real reservations are untouched
        book = None if real is None else real.copy()

        runs[run] = Forecast(
            view.framework,
            view.snapshot,
            view.now,
            held_ends,
            view.admitted,
            waiting,
            queues=view.queues,
            owners=owners,
            backfill=None if book is None else _replay_policy(view, runtimes, book),
            growth=1.25,
            batch_size=64,
        ).run()
    out: dict[str, tuple[float, float] | None] = {}
    for key, p50 in runs[P50].items():
        p90 = runs[P90].get(key)
        if isinstance(p50, float) and isinstance(p90, float):
            out[key] = (p50, max(p50, p90))
        else:
            out[key] = None
    return out


def _replay_policy(
    view: QueueView, runtimes: Runtimes, book: ReservationBook
) -> Callable[[float, Callable[[HeldPod], float | None]], BackfillPolicy]:
    """Reservations and backfill in the replay, as the policy makes them for real."""

    def runtime(pod: PodRequest) -> float | None:
        key = view.owner_of(pod)
        return runtimes.total(key, view.shape_of(key), P90)

    def policy(at: float, ends_at: Callable[[HeldPod], float | None]) -> BackfillPolicy:
        return BackfillPolicy(
            now=at,
            ends_at=ends_at,
            runtime_s=runtime,
            book=book,
            horizon_s=view.horizon_s,
            fair_order=view.fair_order,
        )

    return policy
