"""The Tenants page's numbers, recomputed here from the raw rows (allocations with their bind and
release times, GPU assignments, the telemetry rollups) by a second, brute-force reading of the
definition in scheduling/selectors/efficiency.py, and compared with what the dashboard's live view
and the REST API's /usage serve: one definition of held, busy and overRequest everywhere."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from api.services import token_create
from dashboard.selectors import tenants as tenant_docs
from scheduling.core.scheduler import Framework
from scheduling.models import Allocation, GpuAssignment, Node, Pod, Tenant
from scheduling.profile_files import load_profile
from scheduling.selectors.efficiency import tenant_efficiency
from scheduling.services import nodes as node_services
from scheduling.worker.database_side import database_cycle
from telemetry.models import GpuMinute, PodMinute
from tests.api.conftest import client_for
from tests.builders import make_node
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db]

MINUTES = 12


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    index = 0
    while (index + 1) * 100 < 95 * len(ordered):  # nearest rank: smallest r with r >= 0.95 n
        index += 1
    return ordered[index]


def held_seconds(bound: datetime, released: datetime | None, minute: datetime) -> float:
    """Counted second by second, not by interval arithmetic."""
    end = minute + timedelta(minutes=1)
    seconds = 0
    for s in range(60):
        moment = minute + timedelta(seconds=s, milliseconds=500)
        if bound <= moment < (released or end + timedelta(days=1)):
            seconds += 1
    return seconds


@pytest.fixture
def world() -> tuple[datetime, list[str]]:
    """Two tenants on an exclusive H100 node and a time-sliced T4 node: whole-GPU pods bound and
    released at odd seconds, two shares on one T4; a rolled-up minute of telemetry per minute."""
    for spec in (
        make_node("h100-0").gpus(8, "H100").build(),
        make_node("t4-0").gpus(2, "T4").build(),
    ):
        node_services.node_register(spec=spec, source=Node.Source.SIMULATOR)
    team_a, team_b = factories.tenant("team-a"), factories.tenant("team-b")
    factories.workload(team_a, "train", pods=1, gpus=2)
    factories.workload(team_a, "short", pods=1, gpus=1)
    factories.workload(team_b, "serve", pods=2, gpu_milli=500)
    database_cycle(Framework(load_profile("topology")), identity="t").run_once()
    assert Pod.objects.filter(phase=Pod.Phase.BOUND).count() == 4
    now = timezone.now().replace(second=0, microsecond=0) + timedelta(seconds=20)
    start = now.replace(second=0) - timedelta(minutes=MINUTES)
    rng = random.Random(19)
    bound_at = {
        "train": start - timedelta(minutes=3),
        "short": start + timedelta(minutes=2, seconds=17),
        "serve": start + timedelta(minutes=4, seconds=41),
    }
    for allocation in Allocation.objects.select_related("pod__workload"):
        allocation.bound_at = bound_at[allocation.pod.workload.name]
        if allocation.pod.workload.name == "short":
            allocation.released_at = start + timedelta(minutes=7, seconds=5)
            allocation.active, allocation.state = False, Allocation.State.RELEASED
        allocation.save()
    GpuAssignment.objects.filter(allocation__active=False).update(active=False)
    for i in range(MINUTES):
        minute = start + timedelta(minutes=i)
        GpuMinute.objects.create(minute=minute, node="h100-0", gpu_index=0, samples=4)
        for pod in Pod.objects.select_related("workload__tenant"):
            PodMinute.objects.create(
                minute=minute,
                namespace=pod.workload.tenant.namespace,
                pod=pod.name,
                # train runs through every minute (read all 4 times); the others, partly
                samples=4 if pod.workload.name == "train" else rng.choice([1, 2, 3, 4]),
                gpus_avg=max(pod.gpus, 1),
                used_avg=rng.uniform(0, max(pod.gpus, 1)),
                used_max=rng.uniform(1, 2),
                used_p95=rng.uniform(0, 1),
                fb_used_avg=100,
                fb_used_max=100,
            )
    return now, [team_a.name, team_b.name]


def recompute(now: datetime) -> dict[str, dict[str, float | None]]:
    minutes = sorted(set(GpuMinute.objects.values_list("minute", flat=True)))
    held: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    milli_on_gpu: dict[tuple[int, datetime], float] = defaultdict(float)
    pod_milli: dict[tuple[str, datetime], tuple[int, float]] = {}
    pod_held: dict[tuple[str, datetime], float] = defaultdict(float)
    first_held: dict[str, datetime] = {}
    for assignment in GpuAssignment.objects.select_related("allocation__pod__workload__tenant"):
        allocation = assignment.allocation
        pod = allocation.pod
        assert allocation.bound_at is not None
        name = pod.workload.tenant.name
        first_held[name] = min(first_held.get(name, allocation.bound_at), allocation.bound_at)
        for minute in minutes:
            seconds = held_seconds(allocation.bound_at, allocation.released_at, minute)
            held[pod.workload.tenant.name][minute] += assignment.milli / 1000 * seconds / 60
            milli_on_gpu[(assignment.gpu_id, minute)] += assignment.milli * seconds / 60
            pod_held[(pod.name, minute)] += assignment.milli / 1000 * seconds / 60
            if seconds:
                pod_milli[(pod.name, minute)] = (
                    assignment.gpu_id,
                    assignment.milli * seconds / 60,
                )
    busy: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    owner = {pod.name: pod.workload.tenant.name for pod in Pod.objects.select_related("workload")}
    readings = {m: max(r.samples for r in PodMinute.objects.filter(minute=m)) for m in minutes}
    for row in PodMinute.objects.all():
        if (row.pod, row.minute) not in pod_milli:
            continue  # the pod held no GPU that minute
        gpu, milli = pod_milli[(row.pod, row.minute)]
        share = milli / milli_on_gpu[(gpu, row.minute)]
        seen = row.samples / readings[row.minute]  # read in part of the minute only
        # a pod never counts busier than it held
        used = min(row.used_avg * share * seen, pod_held[(row.pod, row.minute)])
        busy[owner[row.pod]][row.minute] += used
    result = {}
    for tenant in held:
        created = Tenant.objects.get(name=tenant).created_at
        since = min(created, first_held[tenant]).replace(second=0, microsecond=0)
        own = [m for m in minutes if m >= since]  # only the minutes the tenant existed
        mean = sum(held[tenant][m] for m in own) / len(own)
        high = p95([busy[tenant][m] for m in own])
        result[tenant] = {
            "held": mean,
            "busy_p95": high,
            "over_request": mean / high if high >= 0.01 and len(own) >= 5 else None,
            "minutes": len(own),
        }
    return result


def test_page_api_and_efficiency_agree_with_the_raw_rows(world) -> None:
    now, names = world
    expected = recompute(now)
    assert set(expected) == set(names)
    page = tenant_docs.usage(now)
    efficiency = tenant_efficiency(now=now)
    for tenant in names:
        want = expected[tenant]
        shown = page["efficiency"][tenant]
        assert shown["held"] == pytest.approx(want["held"], abs=0.006)
        assert shown["busy_p95"] == pytest.approx(want["busy_p95"], abs=0.006)
        assert shown["over_request"] == pytest.approx(want["over_request"], rel=0.01)
        assert shown["minutes"] == want["minutes"]
        assert efficiency[tenant].requested_gpus == pytest.approx(want["held"], abs=1e-3)
        assert efficiency[tenant].used_p95_gpus == pytest.approx(want["busy_p95"], abs=1e-3)
        # The chart plots the same minutes the table sums up.
        series = page["series"][tenant]
        assert len(series["t"]) == want["minutes"]
        assert sum(series["held"]) / want["minutes"] == pytest.approx(want["held"], abs=0.01)
        assert p95(series["busy"]) == pytest.approx(want["busy_p95"], abs=0.006)
    # team-b's two half shares of one T4 never count as more than the one GPU they share.
    assert max(page["series"]["team-b"]["held"]) == pytest.approx(1.0)
    assert page["window"]["all"]["minutes"] == MINUTES


def test_the_api_serves_the_same_numbers(world) -> None:
    now, names = world
    expected = recompute(now)
    for tenant in names:
        _, token = token_create(tenant=Tenant.objects.get(name=tenant), name="numbers")
        doc = client_for(token).get("/api/v1/usage?window=1h").json()
        want = expected[tenant]
        assert doc["requestedGpus"] == pytest.approx(want["held"], abs=1e-3)
        assert doc["usedP95Gpus"] == pytest.approx(want["busy_p95"], abs=1e-3)
        assert doc["overRequest"] == pytest.approx(want["over_request"], rel=1e-3)
        assert len(doc["series"]) == want["minutes"]
        assert sum(p["heldGpus"] for p in doc["series"]) / want["minutes"] == pytest.approx(
            want["held"], abs=1e-3
        )


def test_collecting_data_before_the_first_rolled_up_minute(db) -> None:
    factories.tenant("team-a")
    page = tenant_docs.usage()
    assert page["window"]["all"]["minutes"] == 0
    assert page["efficiency"] == {} and page["advice"] == {}
