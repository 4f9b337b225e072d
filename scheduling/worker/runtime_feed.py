"""Predicted run times for the scheduling cycle (issue 18): the core's RuntimePredictor learns
from workloads as they finish (read from the database, incrementally, every `refresh_every_s`),
and answers for what runs and what waits, never from a simulated pod's true duration.

A workload's maximumExecutionTimeSeconds caps what is predicted for it (it is stopped then), and
is the prediction when nothing similar has finished yet.

The cycle uses it for reservations and backfill (predicted ends of what nodes hold, predicted run
times of what waits) and for estimated starts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.runtime import JobShape, Prediction, RuntimePredictor
from scheduling.core.types import PodRequest
from scheduling.worker import runtime_selectors

REFRESH_EVERY_S = 30.0


class RuntimeFeed:
    def __init__(
        self,
        *,
        refresh_every_s: float = REFRESH_EVERY_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.refresh_every_s = refresh_every_s
        self.monotonic = monotonic
        self.predictor = RuntimePredictor()
        self._after_id = 0
        self._refreshed_at = -float("inf")
        self._shapes: dict[str, JobShape] = {}  # workload key ("tenant/name") -> shape
        self._started: dict[str, float] = {}  # workload key -> when its first pod started
        self._limits: dict[str, float] = {}  # workload key -> maximumExecutionTimeSeconds

    def refresh(self, keys: Iterable[str] = (), *, force: bool = False) -> None:
        """Learn from what finished since last time; know the shapes and starts of `keys`."""
        if force or self.monotonic() - self._refreshed_at >= self.refresh_every_s:
            for row in runtime_selectors.finished_runtimes(after_id=self._after_id):
                self.predictor.observe(row.shape, row.duration_s, finished_at=row.finished_at)
                self._after_id = max(self._after_id, row.workload_id)
            self._refreshed_at = self.monotonic()
            self._shapes.clear()
            self._started.clear()
            self._limits.clear()
        missing = [k for k in keys if k not in self._shapes]
        if missing:
            for fact in runtime_selectors.workload_facts(missing):
                self._shapes[fact.key] = fact.shape
                if fact.started_at is not None:
                    self._started[fact.key] = fact.started_at
                if fact.limit_s is not None:
                    self._limits[fact.key] = fact.limit_s

    def prediction(self, key: str, now: float) -> Prediction | None:
        """The run time estimated starts are given, recent jobs weighing more."""
        return self._predict(key, now, long_run=False)

    def _predict(self, key: str, now: float, *, long_run: bool) -> Prediction | None:
        shape = self._shapes.get(key)
        if shape is None:
            return None
        started = self._started.get(key)
        elapsed = max(0.0, now - started) if started else 0.0
        prediction = self.predictor.predict(shape, elapsed, long_run=long_run)
        limit = self._limits.get(key)
        if limit is None:
            return prediction
        if prediction is None:  # a declared upper bound is all there is to go by
            return Prediction(limit, limit, 0, "maximumExecutionTimeSeconds (no similar job yet)")
        return replace(
            prediction, p50_s=min(prediction.p50_s, limit), p90_s=min(prediction.p90_s, limit)
        )

    def started_at(self, key: str) -> float | None:
        return self._started.get(key)

    def ends_at(self, now: float) -> Callable[[HeldPod], float | None]:
        """Predicted (p50, over the long run) end of what a node holds, for backfill."""

        def end(held: HeldPod) -> float | None:
            key = held.pod.workload
            prediction = self._predict(key, now, long_run=True)
            started = self._started.get(key, now)
            return None if prediction is None else started + prediction.p50_s

        return end

    def runtime_s(self, now: float) -> Callable[[PodRequest], float | None]:
        """Predicted (p90, over the long run) run time of a waiting pod's workload, for
        backfill."""

        def runtime(pod: PodRequest) -> float | None:
            prediction = self._predict(pod.workload, now, long_run=True)
            return None if prediction is None else prediction.p90_s

        return runtime
