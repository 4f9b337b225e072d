from dataclasses import replace
from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.core.profiles import load_profiles
from scheduling.core.scheduler import Framework
from scheduling.core.types import ServiceClass
from scheduling.models import Allocation, Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.worker import cluster_state
from scheduling.worker.database_side import database_cycle
from scheduling.worker.load_feed import LoadFeed
from telemetry.models import GpuLatest
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
LOAD_PROFILE = """
profiles:
- schedulerName: load
  plugins:
    multiPoint: {enabled: [{name: LoadAware, weight: 5}]}
    score: {disabled: [{name: NodeResourcesFit}]}
"""


def measure(node: str, busy: float, gpus: int = 8, age_s: float = 5.0) -> None:
    sampled = timezone.now() - timedelta(seconds=age_s)
    GpuLatest.objects.bulk_create(
        GpuLatest(node=node, gpu_index=g, uuid=f"{node}-{g}", busy=busy, sampled_at=sampled)
        for g in range(gpus)
    )


def test_refresh_puts_measured_load_and_recent_pods_into_the_snapshot() -> None:
    factories.nodes(2)
    factories.workload(factories.tenant(), "new", gpus=2)
    database_cycle(Framework(load_profile("topology"))).run_once()
    measure("dgx-h100-0000", 0.5)
    measure("dgx-h100-0001", 0.1)
    state = cluster_state.cluster_state()
    LoadFeed().refresh(state, timezone.now())
    load = state.snapshot.gpu_load
    bound = Allocation.objects.get().node.name
    placed = state.held[str(Pod.objects.get().uid)][1].gpu_indices
    i = state.snapshot.index[bound]
    # The pod was just bound, so DCGM cannot show it yet: its expected load (1.0) is added.
    assert [round(load[i, g], 2) for g in placed] == [(0.5 if i == 0 else 0.1) + 1.0] * 2
    assert state.snapshot.load_age_s.tolist() == pytest.approx([5.0, 5.0], abs=1.0)


def test_a_reading_taken_after_the_bind_already_shows_the_pod_and_is_not_added_twice() -> None:
    factories.nodes(1)
    factories.workload(factories.tenant(), "seen", gpus=1)
    database_cycle(Framework(load_profile("topology"))).run_once()
    Allocation.objects.update(bound_at=timezone.now() - timedelta(seconds=30))
    measure("dgx-h100-0000", 0.6, age_s=5.0)  # read 25 s after the bind: it shows the pod
    state = cluster_state.cluster_state()
    LoadFeed().refresh(state, timezone.now())
    (gpu,) = state.held[str(Pod.objects.get().uid)][1].gpu_indices
    # measured 0.6 - 0.6 already attributed to the pod + max(expected 1.0, 0.6)
    assert state.snapshot.gpu_load[0, gpu] == pytest.approx(1.0)
    assert state.snapshot.load_fresh_for_s == 60.0


def test_an_over_requesting_tenants_pods_are_expected_to_use_their_ratio() -> None:
    feed = LoadFeed()
    feed._ratios, feed._ratios_at = {"nlp": 0.25}, feed.monotonic()
    request = replace(cluster_state.pod_request(_pod("nlp", gpus=4)), tenant="nlp")
    assert feed.estimate(request).expected_load == pytest.approx(0.25)
    assert feed.estimate(replace(request, tenant="other")).expected_load == 1.0


def test_worker_places_online_pods_by_measured_load() -> None:
    factories.nodes(2)
    measure("dgx-h100-0000", 0.9)
    measure("dgx-h100-0001", 0.05)
    workload = factories.workload(factories.tenant(), "svc", gpu_milli=300)
    Workload.objects.filter(pk=workload.pk).update(service_class=ServiceClass.ONLINE.value)
    Pod.objects.update(service_class=ServiceClass.ONLINE.value)
    database_cycle(Framework(load_profiles(LOAD_PROFILE)[0])).run_once()
    assert Allocation.objects.get().node.name == "dgx-h100-0001"


def _pod(tenant: str, gpus: int) -> Pod:
    workload = factories.workload(factories.tenant(tenant), f"w-{tenant}", gpus=gpus)
    return Pod.objects.select_related("workload__tenant").get(workload=workload)
