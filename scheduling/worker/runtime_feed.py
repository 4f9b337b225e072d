"""Predicted run times for the scheduling cycle (issue 18): the core's RuntimePredictor learns
from workloads as they finish (read from the database, incrementally, every `refresh_every_s`),
and answers for what runs and what waits, never from a simulated pod's true duration.

Before anything similar has finished, a prior stands in (issue 37), the first of: the workload's
declared maximumExecutionTimeSeconds (it is stopped then; it also caps what is learnt), its
ClusterQueue's `gpusched.io/default-runtime`. Every prediction's basis says which it is ("learned:
p50 of 37 similar jobs (...)", "prior: declared limit (...)", "prior: queue default (...)"); the
learnt quantiles replace the prior once enough of the tenant's own similar work has finished (a
group of its jobs with RuntimePredictor.min_samples of them), not as soon as anything has: the
first jobs to finish are the short ones, across tenants. Without a prior, any group answers.

The cycle uses it for reservations and backfill (predicted ends of what nodes hold, predicted run
times of what waits) and for estimated starts."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import datetime, timedelta

from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.kueue_fields import DEFAULT_RUNTIME_ANNOTATION
from scheduling.core.queueing.runtime import JobShape, Prediction, Prior, RuntimePredictor
from scheduling.core.types import PodRequest
from scheduling.worker import runtime_selectors

REFRESH_EVERY_S = 30.0
LATE_S = 3600.0  # how much earlier than the newest finish read a finish may still be reported


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
        # What was learnt: the latest finish read, and the workloads read that finished within
        # LATE_S of it (a finish the cluster reports late, with its own earlier time, is still
        # read once and only once)
        self._newest: datetime | None = None
        self._recent: dict[int, datetime] = {}
        self._refreshed_at = -float("inf")
        self._shapes: dict[str, JobShape] = {}  # workload key ("tenant/name") -> shape
        self._started: dict[str, float] = {}  # workload key -> when its first pod started
        self._limits: dict[str, float] = {}  # workload key -> maximumExecutionTimeSeconds
        self._defaults: dict[str, Prior] = {}  # workload key -> its queue's default run time

    def refresh(self, keys: Iterable[str] = (), *, force: bool = False) -> None:
        """Learn from what finished since last time; know the shapes and starts of `keys`."""
        if force or self.monotonic() - self._refreshed_at >= self.refresh_every_s:
            self._learn()
            self._refreshed_at = self.monotonic()
            self._shapes.clear()
            self._started.clear()
            self._limits.clear()
            self._defaults.clear()
        missing = [k for k in keys if k not in self._shapes]
        if missing:
            for fact in runtime_selectors.workload_facts(missing):
                self._shapes[fact.key] = fact.shape
                if fact.started_at is not None:
                    self._started[fact.key] = fact.started_at
                if fact.limit_s is not None:
                    self._limits[fact.key] = fact.limit_s
                if fact.queue_default_s is not None:
                    self._defaults[fact.key] = Prior(
                        fact.queue_default_s,
                        f"queue default ({DEFAULT_RUNTIME_ANNOTATION} of ClusterQueue "
                        f"{fact.cluster_queue}: {fact.queue_default_s:g} s)",
                    )

    def _learn(self) -> None:
        rows = []
        if self._newest is not None:  # late reports of finishes up to the newest read
            rows += runtime_selectors.finished_runtimes(
                since=self._newest - timedelta(seconds=LATE_S), exclude_ids=self._recent
            )
            rows = [r for r in rows if r.finished <= self._newest]
        rows += runtime_selectors.finished_runtimes(after=self._newest)
        for row in rows:
            self.predictor.observe(row.shape, row.duration_s, finished_at=row.finished_at)
            self._recent[row.workload_id] = row.finished
            if self._newest is None or row.finished > self._newest:
                self._newest = row.finished
        if self._newest is not None:
            oldest = self._newest - timedelta(seconds=LATE_S)
            self._recent = {pk: at for pk, at in self._recent.items() if at >= oldest}

    def prediction(self, key: str, now: float) -> Prediction | None:
        """The run time estimated starts are given, recent jobs weighing more."""
        return self._predict(key, now, long_run=False)

    def _predict(self, key: str, now: float, *, long_run: bool) -> Prediction | None:
        shape = self._shapes.get(key)
        if shape is None:
            return None
        started = self._started.get(key)
        elapsed = max(0.0, now - started) if started else 0.0
        learned = self.predictor.predict(shape, elapsed, long_run=long_run)
        limit = self._limits.get(key)
        prior = limit is not None or key in self._defaults
        # A prior stands until the tenant's own work has spoken: the first jobs to finish across
        # tenants are the short ones, and one or two of them are a worse guess at a waiting
        # job's run time than its queue's default (issue 37)
        if learned is not None and (learned.tenant_specific or not prior):
            learned = replace(learned, basis=f"learned: {learned.basis}")
            if limit is None:
                return learned
            return replace(
                learned, p50_s=min(learned.p50_s, limit), p90_s=min(learned.p90_s, limit)
            )
        if limit is not None:
            basis = f"declared limit (maximumExecutionTimeSeconds {limit:g} s)"
            return Prior(limit, basis, bound=True).prediction(elapsed)
        default = self._defaults.get(key)
        return None if default is None else default.prediction(elapsed)

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
