"""Estimated starts of waiting workloads for both cluster sides (issue 18), computed by the
scheduling cycle every `every_s` seconds (never per request) and recorded for the API:

- run times predicted from finished workloads (scheduling.worker.runtime_feed), with their basis,
  and before any has finished from a prior (a declared limit, the queue's default run time);
- starts by replaying the queue forward with the real core (scheduling.core.queueing.forecast) on
  a copy of the cycle's snapshot: admission over the cluster queues where gpusched admits, the
  framework's placement with gangs, reservations and backfill; once against p50 and once against
  p90 predictions. What cannot be placed in the replay gets "unknown" with the reason, never
  "now".

Bounded: of the waiting workloads in queue order, no more than hold `max_pods` pending pods
together (the first always) are replayed (the others are not estimated this time), on the
forecast's geometric grid and horizon. Pods, not workloads, are what a replay costs: a cap of 200
workloads as well left a queue of 400 one-GPU jobs half unestimated, and a job at the back got
its first estimate only after a third of its wait (issue 37: 428 of the 881 judged jobs of a
Philly day, docs/benchmarks.md). And the estimates take at most `max_share` of the worker's time:
a run that took d seconds is followed by the next no sooner than d / max_share seconds after it
started (a replay of a deep backlog on thousands of nodes takes seconds; measured, issue 21, it
was most of the worker's unreported time at 5,000 nodes).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import Count

from scheduling import services
from scheduling.core.pod_index import HeldPod
from scheduling.core.queueing.backfill import BackfillPolicy, ReservationBook
from scheduling.core.queueing.forecast import Forecast, Queues, WaitingWork
from scheduling.core.scheduler import Framework
from scheduling.core.types import PodRequest
from scheduling.models import Pod, Workload
from scheduling.selectors import queues as selectors
from scheduling.worker import cluster_state
from scheduling.worker.cluster_state import ClusterState
from scheduling.worker.runtime_feed import RuntimeFeed

EVERY_S = 30.0
MAX_SHARE = 0.1  # of the worker's time
MAX_PODS = 2000
NO_PREDICTION = "no finished workload, declared limit or queue default to predict from yet"


@dataclass
class StartEstimator:
    every_s: float = EVERY_S
    max_pods: int = MAX_PODS
    monotonic: Callable[[], float] = time.monotonic
    max_share: float | None = MAX_SHARE  # None: every `every_s` whatever a run costs
    _ran_at: float = field(default=-float("inf"), init=False)
    _took_s: float = field(default=0.0, init=False)

    def due(self) -> bool:
        wait = self.every_s
        if self.max_share:
            wait = max(wait, self._took_s / self.max_share)
        return self.monotonic() - self._ran_at >= wait

    def run(
        self,
        framework: Framework,
        cluster: ClusterState,
        feed: RuntimeFeed,
        book: ReservationBook,
        horizon_s: float,
        now: datetime,
        *,
        admits: bool,
        starving_after_s: float | None = None,
    ) -> int:
        """Estimate and record; returns how many workloads were estimated. `starving_after_s` is
        the cycle's starvation bound, so that the replay admits as the cycle will."""
        self._ran_at = self.monotonic()
        try:
            return self._run(
                framework,
                cluster,
                feed,
                book,
                horizon_s,
                now,
                admits=admits,
                starving_after_s=starving_after_s,
            )
        finally:
            self._took_s = self.monotonic() - self._ran_at

    def _within_pod_budget(self, order: list[Workload]) -> list[Workload]:
        """The first workloads of `order` whose pending pods add up to at most `max_pods` (the
        first always): the replay costs a placement per pod and grid step."""
        pending = dict(
            Pod.objects.filter(workload__in=order, phase=Pod.Phase.PENDING)
            .values_list("workload_id")
            .annotate(n=Count("id"))
            .order_by()
        )
        kept: list[Workload] = []
        pods = 0
        for w in order:
            pods += pending.get(w.pk, 0)
            if kept and pods > self.max_pods:
                break
            kept.append(w)
        return kept

    def _run(
        self,
        framework: Framework,
        cluster: ClusterState,
        feed: RuntimeFeed,
        book: ReservationBook,
        horizon_s: float,
        now: datetime,
        *,
        admits: bool,
        starving_after_s: float | None,
    ) -> int:
        at = now.timestamp()
        setup = selectors.queue_setup()
        managed = admits and setup.managed
        # Every waiting workload has a pending pod: no more than `max_pods` of them fit the budget
        queued = [
            (w, q)
            for w, q in selectors.queued_workloads(setup, limit=self.max_pods)
            if q is not None
        ]
        # A semi-join, not a join made DISTINCT: that compared whole workload rows (their pod
        # sets' JSON too), one per pending pod, a second a run at 4,000 pending pods.
        unplaced = list(
            Workload.objects.filter(
                state=Workload.State.ADMITTED,
                pk__in=Pod.objects.filter(phase=Pod.Phase.PENDING).values("workload_id"),
            )
            .select_related("tenant")
            .order_by("-priority", "created_at", "id")[: self.max_pods]
        )
        order = self._within_pod_budget([*unplaced, *(w for w, _ in queued)])
        if not order:
            return 0
        pods: dict[int, list[PodRequest]] = {w.pk: [] for w in order}
        for pod in (
            cluster_state.batch_pods()
            .filter(workload__in=order, phase=Pod.Phase.PENDING)
            .order_by("id")
        ):
            pods[pod.workload_id].append(cluster_state.pod_request(pod))
        held = cluster.snapshot.pods.held
        # Which admitted workload a held pod's end releases: the replay tracks admitted
        # workloads only where gpusched admits (a read of every held pod, 20,000 at 5,000 nodes)
        owners = (
            {
                str(uid): str(wid)
                for uid, wid in Pod.objects.filter(uid__in=list(held)).values_list(
                    "uid", "workload_id"
                )
            }
            if managed
            else {}
        )
        keys = {h.pod.workload for h in held.values()} | {
            f"{w.tenant.name}/{w.name}" for w in order
        }
        feed.refresh(sorted(k for k in keys if k))
        predictions = {w.pk: feed.prediction(f"{w.tenant.name}/{w.name}", at) for w in order}
        queued_of = {w.pk: q for w, q in queued}
        # Predicted ends (p50, p90) per workload of the held pods: thousands of pods, few workloads
        held_ends: dict[str, tuple[float, float] | None] = {}
        for key in {h.pod.workload for h in held.values()}:
            p = feed.prediction(key, at)
            started = feed.started_at(key) or at  # bound, starting now
            held_ends[key] = None if p is None else (started + p.p50_s, started + p.p90_s)
        starts = {}
        for quantile in ("p50", "p90"):

            def end(h: HeldPod, quantile: str = quantile) -> float | None:
                ends = held_ends[h.pod.workload]
                return None if ends is None else ends[0 if quantile == "p50" else 1]

            waiting = []
            for w in order:
                p = predictions[w.pk]
                runtime = None if p is None else (p.p50_s if quantile == "p50" else p.p90_s)
                queued_workload = queued_of.get(w.pk) if managed else None
                waiting.append(WaitingWork(str(w.pk), tuple(pods[w.pk]), queued_workload, runtime))
            replay_book = book.copy()
            starts[quantile] = Forecast(
                framework,
                cluster.snapshot,
                at,
                {uid: end(h) for uid, h in held.items()},
                selectors.admitted_workloads() if managed else [],
                waiting,
                queues=Queues(
                    list(setup.cluster_queues.values()),
                    setup.flavors,
                    list(setup.local_queues.values()),
                    list(setup.cohorts.values()),
                    setup.fair_usage,
                    starving_after_s,
                )
                if managed
                else None,
                owners=owners,
                backfill=_replay_policy(feed, at, replay_book, horizon_s),
            ).run()
        estimates = []
        for w in order:
            p = predictions[w.pk]
            p50, p90 = starts["p50"].get(str(w.pk)), starts["p90"].get(str(w.pk))
            start_p50 = start_p90 = None
            reason = ""
            if isinstance(p50, float) and isinstance(p90, float):
                start_p50, start_p90 = _when(p50), _when(max(p50, p90))
            else:
                reason = p50 if isinstance(p50, str) else str(p90)
                if p is None:
                    reason = f"{reason} ({NO_PREDICTION})"
            estimates.append(
                services.WorkloadEstimate(
                    workload_id=w.pk,
                    runtime_p50_s=None if p is None else p.p50_s,
                    runtime_p90_s=None if p is None else p.p90_s,
                    runtime_basis=NO_PREDICTION if p is None else p.basis,
                    start_p50=start_p50,
                    start_p90=start_p90,
                    start_unknown_reason=reason,
                )
            )
        return services.workload_estimates_record(estimates=estimates, now=now)


def _when(at: float) -> datetime:
    return datetime.fromtimestamp(at, tz=UTC)


def _replay_policy(
    feed: RuntimeFeed, at: float, book: ReservationBook, horizon_s: float
) -> Callable[[float, Callable[[HeldPod], float | None]], BackfillPolicy]:
    runtime = feed.runtime_s(at)

    def policy(step: float, ends_at: Callable[[HeldPod], float | None]) -> BackfillPolicy:
        return BackfillPolicy(
            now=step, ends_at=ends_at, runtime_s=runtime, book=book, horizon_s=horizon_s
        )

    return policy
