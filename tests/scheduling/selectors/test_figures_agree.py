"""Property: for random histories (tenants created at random minutes, whole and shared GPUs bound
and released at odd seconds, partial minutes of telemetry, MIG slices), the efficiency figures read
through the REST API, the Tenants page's selector and /metrics all equal a brute-force
recomputation from the raw rows written here, and busy <= held in every minute.

The recomputation reads the definition in docs/dashboard.md second by second: held counts each
second a GPU (or share) was bound; a pod's DCGM reading is scaled by its share of the milli held on
each of its GPUs and by the part of the minute's readings it got (the most any pod of the cluster
got), capped at what the pod held; a tenant's minutes start at the minute it was created."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from api.services import token_create
from dashboard.selectors import tenants as tenant_docs
from scheduling.models import Allocation, Gpu, GpuAssignment, Node, Tenant, Workload
from scheduling.selectors.efficiency import minutes_of, usage_window
from scheduling.services import nodes as node_services
from telemetry.models import GpuMinute, PodMinute
from tests.api.conftest import client_for
from tests.builders import make_node
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db]

MINUTES = 8  # measured minutes, ending two minutes before now
GPUS = 3


@dataclass(frozen=True)
class PodPlan:
    tenant: int
    kind: str  # "whole" (1 or 2 GPUs), "share" (a part of one GPU) or "mig" (a MIG slot)
    gpu: int
    size: int  # GPUs (whole) or milli (share)
    bound_s: int  # seconds after the first measured minute (negative: before the window)
    held_s: int | None  # None: still held
    used: tuple[float, ...]  # DCGM busy per minute, as the pod reports it
    samples: tuple[int, ...]  # readings per minute


pods = st.builds(
    PodPlan,
    tenant=st.integers(0, 2),
    kind=st.sampled_from(["whole", "share", "share", "mig"]),
    gpu=st.integers(0, GPUS - 2),
    size=st.sampled_from([1, 2, 250, 500]),
    bound_s=st.integers(-90, MINUTES * 60 - 1),
    held_s=st.none() | st.integers(1, MINUTES * 60),
    used=st.lists(st.floats(0, 2), min_size=MINUTES + 2, max_size=MINUTES + 2).map(tuple),
    samples=st.lists(st.integers(1, 4), min_size=MINUTES + 2, max_size=MINUTES + 2).map(tuple),
)
histories = st.tuples(
    st.lists(st.integers(-3, MINUTES - 1), min_size=3, max_size=3),  # tenants' creation minutes
    st.lists(pods, min_size=1, max_size=6),
)


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    rank = 1
    while rank * 100 < 95 * len(ordered):  # nearest rank: the smallest r with r >= 0.95 n
        rank += 1
    return ordered[rank - 1]


def held_seconds(bound: datetime, released: datetime | None, minute: datetime) -> int:
    """Seconds of `minute` the hold covers, counted one by one."""
    moments = (minute + timedelta(seconds=s, milliseconds=500) for s in range(60))
    return sum(bound <= m and (released is None or m < released) for m in moments)


def write(history: tuple[list[int], list[PodPlan]], node: Node, start: datetime) -> list[str]:
    """The raw rows of a history: tenants, pods, allocations, GPU assignments, rolled-up minutes."""
    created, plans = history
    names = [f"t{i}" for i in range(3)]
    for name, created_minute in zip(names, created, strict=True):
        tenant = factories.tenant(name)
        Tenant.objects.filter(pk=tenant.pk).update(
            created_at=start + timedelta(minutes=created_minute, seconds=13)
        )
    gpus = list(Gpu.objects.filter(node=node).order_by("index"))
    for k, plan in enumerate(plans):
        tenant = Tenant.objects.get(name=names[plan.tenant])
        # A pod is bound after its tenant exists.
        bound = max(start + timedelta(seconds=plan.bound_s), tenant.created_at)
        released = None if plan.held_s is None else bound + timedelta(seconds=plan.held_s)
        whole = plan.kind == "whole"
        workload = factories.workload(
            tenant,
            f"w{k}",
            gpus=min(plan.size, 2) if whole else 0,
            gpu_milli=0 if whole else 500,
        )
        pod = workload.pods.get()
        allocation = Allocation.objects.create(
            pod=pod,
            node=node,
            state=Allocation.State.BOUND if released is None else Allocation.State.RELEASED,
            active=released is None,
            bound_at=bound,
            released_at=released,
        )
        holds: list[tuple[Gpu, int, int | None]]  # GPU, milli, MIG slot
        if plan.kind == "mig":
            holds = [(gpus[-1], 143, k)]
        elif whole:
            holds = [(gpus[plan.gpu + i], 1000, None) for i in range(min(plan.size, 2))]
        else:
            holds = [(gpus[plan.gpu], plan.size if plan.size > 2 else 500, None)]
        for gpu, milli, slot in holds:
            GpuAssignment.objects.create(
                allocation=allocation, gpu=gpu, milli=milli, mig_slot=slot, active=released is None
            )
        for i in range(MINUTES):
            minute = start + timedelta(minutes=i)
            if held_seconds(bound, released, minute) or (i == 0 and k % 2):
                PodMinute.objects.create(
                    minute=minute,
                    namespace=tenant.namespace,
                    pod=pod.name,
                    samples=plan.samples[i],
                    gpus_avg=1,
                    used_avg=plan.used[i],
                    used_max=plan.used[i + 1],
                    used_p95=plan.used[i],
                    fb_used_avg=10,
                    fb_used_max=10,
                )
    for i in range(MINUTES):
        GpuMinute.objects.create(
            minute=start + timedelta(minutes=i), node=node.name, gpu_index=0, samples=4
        )
    return names


def recompute(start: datetime) -> dict[str, dict[str, float | int | None]]:
    """The figures from the raw rows, by the definition read second by second."""
    minutes = [start + timedelta(minutes=i) for i in range(MINUTES)]
    held: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    on_gpu: dict[tuple[int, datetime], float] = defaultdict(float)
    pod_gpu: dict[tuple[str, datetime], dict[int, float]] = defaultdict(lambda: defaultdict(float))
    pod_held: dict[tuple[str, datetime], float] = defaultdict(float)
    first: dict[str, datetime] = {}
    owner: dict[str, str] = {}
    rows = GpuAssignment.objects.filter(mig_slot__isnull=True).select_related(
        "allocation__pod__workload__tenant"
    )
    for assignment in rows:
        allocation = assignment.allocation
        assert allocation.bound_at is not None
        pod, tenant = allocation.pod.name, allocation.pod.workload.tenant.name
        owner[pod] = tenant
        parts = [
            held_seconds(allocation.bound_at, allocation.released_at, minute) / 60
            for minute in minutes
        ]
        if not any(parts):  # held only outside the measured minutes: nothing in the window
            continue
        first[tenant] = min(first.get(tenant, allocation.bound_at), allocation.bound_at)
        for minute, part in zip(minutes, parts, strict=True):
            held[tenant][minute] += assignment.milli / 1000 * part
            on_gpu[(assignment.gpu_id, minute)] += assignment.milli * part
            if part:
                pod_gpu[(pod, minute)][assignment.gpu_id] += assignment.milli * part
                pod_held[(pod, minute)] += assignment.milli / 1000 * part
    readings = {
        m: max(PodMinute.objects.filter(minute=m).values_list("samples", flat=True))
        for m in minutes
        if PodMinute.objects.filter(minute=m).exists()
    }
    busy: dict[str, dict[datetime, float]] = defaultdict(lambda: defaultdict(float))
    for row in PodMinute.objects.all():
        gpus = pod_gpu.get((row.pod, row.minute))
        if not gpus:
            continue  # a MIG pod, or a pod that held no GPU that minute
        share = sum(milli / on_gpu[(gpu, row.minute)] for gpu, milli in gpus.items()) / len(gpus)
        seen = row.samples / readings[row.minute]
        used = min(row.used_avg * share * seen, pod_held[(row.pod, row.minute)])
        busy[owner[row.pod]][row.minute] += used
    result: dict[str, dict[str, float | int | None]] = {}
    for tenant in held:
        created = Tenant.objects.get(name=tenant).created_at
        since = min(created, first[tenant]).replace(second=0, microsecond=0)
        own = [m for m in minutes if m >= since]
        for m in own:
            assert busy[tenant][m] <= held[tenant][m] + 1e-9
        mean = sum(held[tenant][m] for m in own) / len(own)
        high = p95([busy[tenant][m] for m in own])
        result[tenant] = {
            "held": mean,
            "busy_p95": high,
            "over_request": mean / high if high >= 0.01 and len(own) >= 5 else None,
            "minutes": len(own),
        }
    return result


def metrics(client: Client) -> dict[tuple[str, str], float]:
    text = client.get("/metrics").content.decode()
    return {
        (sample.name, sample.labels.get("tenant", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("gpusched_tenant_")
    }


def clean() -> None:
    Allocation.objects.all().delete()
    Workload.objects.all().delete()
    PodMinute.objects.all().delete()
    GpuMinute.objects.all().delete()


def close(shown: float | None, want: float | int | None, tolerance: float) -> bool:
    if shown is None or want is None:
        return shown is None and want is None
    return abs(shown - want) <= tolerance * max(1.0, abs(want))


@pytest.fixture
def node(settings_fixture: None) -> Node:
    spec = make_node("t4-0").gpus(GPUS, "T4").build()
    return node_services.node_register(spec=spec, source=Node.Source.SIMULATOR)


@pytest.fixture
def settings_fixture(settings) -> None:
    settings.USAGE_RATIOS_MAX_AGE_S = 0.0  # /metrics reads the numbers afresh


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(history=histories)
# A tenant whose only hold ended as the first measured minute began: it has no figures.
@example(history=([0, 0, -1], [PodPlan(2, "whole", 0, 1, -1, 1, (0.0,) * 10, (1,) * 10)]))
def test_every_reader_shows_the_recomputed_figures(node: Node, history) -> None:
    clean()
    now = timezone.now()
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=MINUTES + 2)
    names = write(history, node, start)
    expected = recompute(start)
    page = tenant_docs.usage(now)
    everyone = minutes_of(usage_window(start=now - timedelta(hours=1), end=now))
    exported = metrics(Client())
    for name in names:
        want = expected.get(name)
        # One tenant's read equals the cluster's read filtered to it.
        alone = minutes_of(usage_window(start=now - timedelta(hours=1), end=now, tenant=name))
        assert alone.get(name, []) == everyone.get(name, [])
        _, token = token_create(
            tenant=Tenant.objects.get(name=name), name=f"n{uuid.uuid4().hex[:8]}"
        )
        doc = client_for(token).get("/api/v1/usage?window=1h").json()
        for point in doc["series"]:
            assert point["usedAvgGpus"] <= point["heldGpus"] + 1e-9
        if want is None:  # held no GPU (MIG slices are not GPUs): no figures anywhere
            assert doc["series"] == [] and doc["overRequest"] is None
            assert name not in page["efficiency"]
            assert ("gpusched_tenant_gpus_held", name) not in exported
            continue
        assert len(doc["series"]) == want["minutes"]
        assert close(doc["requestedGpus"], want["held"], 1e-3)
        assert close(doc["usedP95Gpus"], want["busy_p95"], 1e-3)
        assert close(exported[("gpusched_tenant_gpus_held", name)], want["held"], 1e-3)
        assert close(exported[("gpusched_tenant_gpus_busy_p95", name)], want["busy_p95"], 1e-3)
        assert exported[("gpusched_tenant_measured_minutes", name)] == want["minutes"]
        shown = page["efficiency"].get(name)
        if shown is not None:  # the page lists tenants that held or used something
            assert close(shown["held"], want["held"], 0.006)
            assert close(shown["busy_p95"], want["busy_p95"], 0.006)
            assert shown["minutes"] == want["minutes"]
            for busy, held in zip(
                page["series"][name]["busy"], page["series"][name]["held"], strict=True
            ):
                assert busy <= held
        busy_p95 = want["busy_p95"]
        assert isinstance(busy_p95, float)
        if abs(busy_p95 - 0.01) > 1e-3:  # away from the threshold rounding could cross
            assert close(doc["overRequest"], want["over_request"], 0.02)
            assert close(
                exported.get(("gpusched_tenant_over_request", name)), want["over_request"], 0.02
            )
