"""Reservations through the scheduling cycle on the database side (issue 18): the starvation case
of the issue, one 8-GPU node, a 2-pod x 2-GPU gang at the head of the queue and 1-GPU pods behind
it; the gang starts within a bounded number of cycles; a reservation that cannot complete in
its horizon is released with an event; and reservations follow the fair-share order."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import yaml
from django.utils import timezone

from scheduling import events, services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources
from scheduling.models import Event, Pod, Workload
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.worker import metrics
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def submit(name: str, *, gpus: int, pods: int = 1, tenant: str = "t") -> Workload:
    template = PodTemplate(resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=gpus))
    return services.workload_submit(
        tenant=factories.tenant(tenant),
        name=name,
        pod_sets=[
            services.PodSetSpec("main", pods, template, min_count=pods if pods > 1 else None)
        ],
    )


def placed(name: str) -> int:
    return Pod.objects.filter(workload__name=name, phase__in=Pod.PLACED_PHASES).count()


def busy_node(start: datetime, tenant: str = "t") -> tuple[SchedulingCycle, list[Pod]]:
    """One 8-GPU node, full with eight 1-GPU pods that started running."""
    factories.nodes(1)
    for k in range(8):
        submit(f"old-{k}", gpus=1, tenant=tenant)
    cycle = database_cycle(Framework(load_profile("topology")), identity="w1")
    cycle.clock = lambda: start
    cycle.run_once()
    old = list(Pod.objects.filter(workload__name__startswith="old-").order_by("id"))
    assert all(p.phase == Pod.Phase.BOUND for p in old)
    services.pods_start(pods=old, now=start)
    return cycle, old


def test_the_head_gang_starts_within_bounded_cycles_on_one_8_gpu_node() -> None:
    start = timezone.now()
    cycle, old = busy_node(start)
    submit("train", gpus=2, pods=2)  # the head of the queue
    for k in range(6):
        submit(f"small-{k}", gpus=1)
    started_after = None
    now = start
    cycle.clock = lambda: now
    for k in range(6):  # one old pod ends per cycle
        now = start + timedelta(seconds=30 * (k + 1))
        services.pods_finish(pods=[old[k]], now=now)
        report = cycle.run_once()
        if placed("train") == 2 and started_after is None:
            started_after = k + 1
        if started_after is None:
            assert report.reserved == 1
            assert sum(placed(f"small-{j}") for j in range(6)) == 0  # nothing takes its GPUs
    assert started_after == 4  # as soon as four GPUs are free
    # And the small pods take what is left, then.
    assert sum(placed(f"small-{j}") for j in range(6)) == 2


def released() -> float:
    return metrics.registry.get_sample_value("gpusched_reservations_released_total") or 0.0


def test_a_reservation_past_its_horizon_is_released_with_an_event_and_counted() -> None:
    start = timezone.now()
    cycle, old = busy_node(start)
    cycle.reservation_horizon_s = 60.0
    submit("train", gpus=2, pods=2)
    submit("small", gpus=1)
    cycle.clock = lambda: start + timedelta(seconds=30)
    report = cycle.run_once()
    assert report.reserved == 1
    metrics.record_cycle(report)
    assert metrics.registry.get_sample_value("gpusched_reservations_held") == 1
    released_before = released()
    services.pods_finish(pods=[old[0]], now=start + timedelta(seconds=100))
    cycle.clock = lambda: start + timedelta(seconds=100)  # held 70 s > 60 s
    report = cycle.run_once()
    assert report.reservations_released == 1 and report.reserved == 0
    metrics.record_cycle(report)
    assert metrics.registry.get_sample_value("gpusched_reservations_held") == 0
    assert released() == released_before + 1
    assert placed("small") == 1  # the GPU freed goes to whoever fits
    (row,) = Event.objects.filter(type=events.ReservationReleased.TYPE)
    assert row.payload["name"] == "train" and "without starting" in row.payload["reason"]


def test_a_borrowing_queue_s_reservation_leaves_the_node_to_a_queue_within_its_share() -> None:
    """Cohort of two queues: `big` (nominal 2 GPUs) borrows for its 2 x 2-GPU gang, `small`
    (nominal 14) is within its share. The gang reserves the node; the GPU the first end frees
    goes to small's new pod all the same, as fair sharing serves small first."""
    docs = ["kind: ResourceFlavor\nmetadata: {name: any}"]
    for name, gpus in (("big", 2), ("small", 14)):
        docs.append(
            f"kind: ClusterQueue\nmetadata: {{name: {name}}}\nspec:\n  cohortName: c\n"
            "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n"
            f"    - name: any\n      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]"
        )
        docs.append(
            f"kind: LocalQueue\nmetadata: {{name: default, namespace: {name}}}\n"
            f"spec: {{clusterQueue: {name}}}"
        )
    factories.tenant("big")
    factories.tenant("small")
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all("\n---\n".join(docs)))))
    start = timezone.now()
    cycle, old = busy_node(start, tenant="small")
    submit("train", gpus=2, pods=2, tenant="big")
    cycle.clock = lambda: start + timedelta(seconds=30)
    assert cycle.run_once().reserved == 1
    submit("late", gpus=1, tenant="small")
    services.pods_finish(pods=[old[0]], now=start + timedelta(seconds=60))
    cycle.clock = lambda: start + timedelta(seconds=60)
    report = cycle.run_once()
    assert placed("late") == 1 and placed("train") == 0
    assert report.reserved == 1  # still held, against queues at or behind big's share
