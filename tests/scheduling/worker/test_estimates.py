"""Run-time predictions and estimated starts recorded by the scheduling cycle (issue 18): learnt
from finished workloads only, never from a simulated pod's true duration; the start from the
queue replayed with the real core; "unknown" with the reason when it cannot be known."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from scheduling import services
from scheduling.core.queueing.kueue_fields import DEFAULT_RUNTIME_ANNOTATION
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.queueing.runtime import JobShape
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources
from scheduling.models import Pod, Workload
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.selectors import queues as selectors
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from scheduling.worker.estimates import StartEstimator
from scheduling.worker.runtime_feed import RuntimeFeed
from sim.runs import simulations_record
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def submit(
    name: str, *, gpus: int = 8, duration_s: float | None = None, tenant: str = "vision"
) -> Workload:
    template = PodTemplate(
        resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=gpus),
    )
    submitted = services.workload_submit(
        tenant=factories.tenant(tenant),
        name=name,
        pod_sets=[services.PodSetSpec("main", 1, template)],
    )
    if duration_s:
        simulations_record(submitted, duration_s=duration_s)
    return submitted


class Run:
    def __init__(self, start: datetime) -> None:
        self.now = start
        self.cycle: SchedulingCycle = database_cycle(
            Framework(load_profile("topology")), identity="w1"
        )
        self.cycle.clock = lambda: self.now
        self.cycle.estimator = StartEstimator(every_s=0, max_share=None)
        self.cycle.runtime_feed = RuntimeFeed(refresh_every_s=0)

    def step(self, seconds: float = 0.0) -> None:
        self.now += timedelta(seconds=seconds)
        self.cycle.run_once()


def run_to_end(run: Run, name: str, seconds: float, *, tenant: str = "vision") -> None:
    submit(name, duration_s=10_000, tenant=tenant)  # the simulator's true duration: never read
    run.step(1)
    pods = list(Pod.objects.filter(workload__name=name))
    services.pods_start(pods=pods, now=run.now)
    run.now += timedelta(seconds=seconds)
    services.pods_finish(pods=pods, now=run.now)


def test_the_start_is_estimated_from_what_similar_finished_jobs_took() -> None:
    factories.nodes(1)  # 8 GPUs: one 8-GPU job at a time
    run = Run(timezone.now())
    for k in range(5):
        run_to_end(run, f"train-{k:03d}", 600.0)
    submit("train-005", duration_s=10_000)
    run.step(1)
    running = list(Pod.objects.filter(workload__name="train-005"))
    services.pods_start(pods=running, now=run.now)
    started = run.now
    submit("train-006", duration_s=10_000)
    run.step(60)  # train-005 has run 60 s of its predicted 600
    waiting = Workload.objects.get(name="train-006")
    assert waiting.runtime_p50_s == pytest.approx(600.0, abs=1.0)
    assert waiting.runtime_basis.startswith("learned: p50 of 5 similar jobs")
    assert "name train" in waiting.runtime_basis
    assert waiting.start_p50 is not None
    assert abs((waiting.start_p50 - (started + timedelta(seconds=600))).total_seconds()) <= 2
    assert waiting.start_p90 is not None and waiting.start_p90 >= waiting.start_p50
    assert waiting.start_unknown_reason == ""
    (pending,) = [p for p in selectors.pending_workloads(run.now) if p.workload.name == "train-006"]
    assert pending.estimate is not None and pending.estimate.p50 == waiting.start_p50


def test_without_any_finished_job_the_start_is_unknown_with_the_reason() -> None:
    """Nothing has finished: the running job's end cannot be predicted, so the waiting one's
    start is unknown, never "now"."""
    factories.nodes(1)
    run = Run(timezone.now())
    submit("first", duration_s=600)
    run.step(1)
    services.pods_start(pods=list(Pod.objects.filter(workload__name="first")), now=run.now)
    submit("second", duration_s=600)
    run.step(10)
    waiting = Workload.objects.get(name="second")
    assert waiting.start_p50 is None and waiting.start_p90 is None
    assert "no predicted end" in waiting.start_unknown_reason
    assert "no finished workload, declared limit or queue default" in waiting.start_unknown_reason


def queue_with_default_runtime(default: str) -> None:
    """One ClusterQueue of 8 GPUs whose workloads are assumed to run `default` until some have
    finished, and tenants vision's and search's LocalQueue `default` pointing at it."""
    services.queues_apply(
        config=parse_documents(
            [
                {"kind": "ResourceFlavor", "metadata": {"name": "any"}},
                {
                    "kind": "ClusterQueue",
                    "metadata": {
                        "name": "team",
                        "annotations": {DEFAULT_RUNTIME_ANNOTATION: default},
                    },
                    "spec": {
                        "namespaceSelector": {},
                        "resourceGroups": [
                            {
                                "coveredResources": ["nvidia.com/gpu"],
                                "flavors": [
                                    {
                                        "name": "any",
                                        "resources": [
                                            {"name": "nvidia.com/gpu", "nominalQuota": 16}
                                        ],
                                    }
                                ],
                            }
                        ],
                    },
                },
                *(
                    {
                        "kind": "LocalQueue",
                        "metadata": {"name": "default", "namespace": factories.tenant(t).name},
                        "spec": {"clusterQueue": "team"},
                    }
                    for t in ("vision", "search")
                ),
            ]
        )
    )


def test_a_cold_start_queue_gets_an_estimate_from_its_default_run_time() -> None:
    """Nothing has finished yet: the queue's default run time stands in, and the basis says so;
    one finished job does not replace it (the tenant's own similar work must speak first)."""
    factories.nodes(1)  # 8 GPUs: one 8-GPU job at a time
    queue_with_default_runtime("10m")
    run = Run(timezone.now())
    submit("first", duration_s=10_000)
    run.step(1)
    services.pods_start(pods=list(Pod.objects.filter(workload__name="first")), now=run.now)
    started = run.now
    submit("second", duration_s=10_000)
    run.step(10)
    waiting = Workload.objects.get(name="second")
    assert waiting.runtime_p50_s == 600.0
    assert waiting.runtime_basis == (
        f"prior: queue default ({DEFAULT_RUNTIME_ANNOTATION} of ClusterQueue team: 600 s)"
    )
    assert waiting.start_p50 == started + timedelta(seconds=600)
    assert waiting.start_unknown_reason == ""

    services.pods_finish(pods=list(Pod.objects.filter(workload__name="first")), now=run.now)
    submit("third", duration_s=10_000)
    run.step(1)  # second starts; third waits behind it
    services.pods_start(pods=list(Pod.objects.filter(workload__name="second")), now=run.now)
    run.step(1)
    third = Workload.objects.get(name="third")
    assert third.runtime_basis.startswith("prior: queue default")
    assert third.runtime_p50_s == 600.0
    assert third.start_p50 is not None


def test_the_prior_gives_way_once_enough_of_the_tenant_s_own_jobs_have_finished() -> None:
    """The first jobs to finish are the short ones: four of the tenant's, or any number of
    another tenant's, leave the queue default standing; the fifth of its own replaces it."""
    factories.nodes(1)
    queue_with_default_runtime("10m")
    run = Run(timezone.now())
    for k in range(5):
        run_to_end(run, f"other-{k}", 30.0, tenant="search")
    for k in range(4):
        run_to_end(run, f"train-{k:03d}", 300.0)
    assert Workload.objects.filter(state=Workload.State.FINISHED).count() == 9
    submit("train-100", duration_s=10_000)
    run.step(1)
    services.pods_start(pods=list(Pod.objects.filter(workload__name="train-100")), now=run.now)
    submit("train-101", duration_s=10_000)
    run.step(1)
    waiting = Workload.objects.get(name="train-101")
    assert waiting.runtime_basis.startswith("prior: queue default")
    assert waiting.runtime_p50_s == 600.0

    services.pods_finish(pods=list(Pod.objects.filter(workload__name="train-100")), now=run.now)
    run.step(1)  # train-101 starts; train-102 waits behind it
    services.pods_start(pods=list(Pod.objects.filter(workload__name="train-101")), now=run.now)
    submit("train-102", duration_s=10_000)
    run.step(1)
    waiting = Workload.objects.get(name="train-102")
    assert waiting.runtime_basis.startswith("learned: p50 of 5 similar jobs (tenant vision")


def test_a_declared_limit_comes_before_the_queue_default() -> None:
    factories.nodes(1)
    queue_with_default_runtime("10m")
    run = Run(timezone.now())
    first = submit("first", duration_s=10_000)
    Workload.objects.filter(pk=first.pk).update(maximum_execution_time_s=300)
    run.step(1)
    services.pods_start(pods=list(Pod.objects.filter(workload__name="first")), now=run.now)
    started = run.now
    submit("second", duration_s=10_000)
    run.step(10)
    waiting = Workload.objects.get(name="second")
    assert waiting.start_p50 == started + timedelta(seconds=300)  # first ends by its limit
    assert waiting.runtime_basis.startswith("prior: queue default")


def test_estimates_take_at_most_their_share_of_the_worker() -> None:
    """A run that took 2 s waits 20 s (a tenth of the time) before the next, even though
    `every_s` is 1 s; a cheap run waits `every_s`."""
    clock = [100.0]
    estimator = StartEstimator(every_s=1.0, max_share=0.1, monotonic=lambda: clock[0])
    took = [2.0]

    def replay(*args: object, **kwargs: object) -> int:
        clock[0] += took[0]
        return 0

    estimator._run = replay  # type: ignore[method-assign]
    assert estimator.due()
    estimator.run(None, None, None, None, 0.0, timezone.now(), admits=False)  # type: ignore[arg-type]
    clock[0] = 100.0 + 19.0
    assert not estimator.due()
    clock[0] = 100.0 + 20.0
    assert estimator.due()
    took[0] = 0.01
    estimator.run(None, None, None, None, 0.0, timezone.now(), admits=False)  # type: ignore[arg-type]
    clock[0] += 1.0
    assert estimator.due()


def test_the_replay_stops_at_the_pod_budget_in_queue_order() -> None:
    """Three 8-GPU workloads wait behind a running one; with room for two pods in the replay,
    the first two in queue order are estimated and the third is left for a later run."""
    factories.nodes(1)
    run = Run(timezone.now())
    run.cycle.estimator = StartEstimator(every_s=0, max_share=None, max_pods=2)
    submit("running", duration_s=600)
    run.step(1)
    for name in ("wait-1", "wait-2", "wait-3"):
        submit(name, duration_s=600)
    run.step(1)
    estimated = set(
        Workload.objects.filter(estimated_at__isnull=False).values_list("name", flat=True)
    )
    assert estimated == {"wait-1", "wait-2"}


def test_a_queue_deeper_than_200_workloads_is_estimated_whole() -> None:
    """Pods bound the replay, not workloads: 250 one-GPU jobs waiting behind a running one are
    all estimated in one run (a cap of 200 workloads left the back of such a queue without an
    estimate for a third of its wait, issue 37)."""
    factories.nodes(1)
    run = Run(timezone.now())
    submit("running", duration_s=600)
    run.step(1)
    for k in range(250):
        submit(f"small-{k:03d}", gpus=1, duration_s=600)
    run.step(1)
    waiting = Workload.objects.filter(name__startswith="small-")
    assert waiting.filter(estimated_at__isnull=False).count() == 250


def test_a_long_job_that_finishes_after_later_ones_is_learnt() -> None:
    """Learning reads what finished in the order it finished, not by id: read after the short
    job submitted after it had finished, the long job was passed by for good, and only short run
    times were learnt (issue 37)."""
    factories.nodes(2)
    run = Run(timezone.now())
    feed = RuntimeFeed(refresh_every_s=0)
    submit("long", duration_s=10_000)
    submit("short", duration_s=10_000)
    run.step(1)
    pods = {n: list(Pod.objects.filter(workload__name=n)) for n in ("long", "short")}
    services.pods_start(pods=[*pods["long"], *pods["short"]], now=run.now)
    services.pods_finish(pods=pods["short"], now=run.now + timedelta(seconds=60))
    feed.refresh()
    services.pods_finish(pods=pods["long"], now=run.now + timedelta(seconds=3000))
    feed.refresh()
    feed.refresh()  # and each once
    assert feed.predictor.observed == 2
    learnt = feed.predictor.predict(JobShape.of("vision", "x", pod_sets=((1, 8),)))
    assert learnt is not None and learnt.p90_s > 60.0


def test_a_finish_reported_late_with_its_own_earlier_time_is_learnt_once() -> None:
    """The Kubernetes side records a pod's end at its container's finishedAt, which may come
    before a finish already read."""
    factories.nodes(2)
    run = Run(timezone.now())
    feed = RuntimeFeed(refresh_every_s=0)
    submit("seen-late", duration_s=10_000)
    submit("seen-first", duration_s=10_000)
    run.step(1)
    pods = {n: list(Pod.objects.filter(workload__name=n)) for n in ("seen-late", "seen-first")}
    services.pods_start(pods=[*pods["seen-late"], *pods["seen-first"]], now=run.now)
    services.pods_finish(pods=pods["seen-first"], now=run.now + timedelta(seconds=600))
    feed.refresh()
    services.pods_finish(pods=pods["seen-late"], now=run.now + timedelta(seconds=300))
    feed.refresh()
    feed.refresh()
    assert feed.predictor.observed == 2
