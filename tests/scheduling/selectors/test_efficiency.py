from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.core.scheduler import Framework
from scheduling.models import Allocation, Pod
from scheduling.profile_files import load_profile
from scheduling.selectors.efficiency import recent_usage_ratios, tenant_efficiency, workload_advice
from scheduling.worker.database_side import database_cycle
from telemetry.models import GpuMinute, PodMinute
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def minutes(namespace: str, pod: str, used: float, count: int = 30) -> None:
    """`count` rolled-up minutes of one pod (and of the GPUs, which makes them measured)."""
    now = timezone.now().replace(second=0, microsecond=0)
    for k in range(count):
        GpuMinute.objects.get_or_create(
            minute=now - timedelta(minutes=k), node="n", gpu_index=0, defaults={"samples": 4}
        )
    PodMinute.objects.bulk_create(
        PodMinute(
            minute=now - timedelta(minutes=k),
            namespace=namespace,
            pod=pod,
            samples=4,
            gpus_avg=1,
            used_avg=used,
            used_max=used,
            used_p95=used,
            fb_used_avg=0,
            fb_used_max=0,
        )
        for k in range(count)
    )


def test_over_requesting_tenant_and_right_sizing_advice() -> None:
    factories.nodes(2)
    nlp, vision = factories.tenant("nlp"), factories.tenant("vision")
    factories.workload(nlp, "big", pods=1, gpus=8)
    factories.workload(vision, "busy", pods=1, gpus=2)
    database_cycle(Framework(load_profile("topology"))).run_once()
    hour_ago = timezone.now() - timedelta(hours=1)
    Allocation.objects.update(bound_at=hour_ago)  # both held their GPUs for the whole window
    minutes("nlp", Pod.objects.get(workload__name="big").name, used=1.6)
    minutes("vision", Pod.objects.get(workload__name="busy").name, used=1.9)

    report = tenant_efficiency(window=timedelta(hours=1))
    assert report["nlp"].requested_gpus == pytest.approx(8, rel=0.01)
    assert report["nlp"].over_request == pytest.approx(5.0, rel=0.01)
    assert report["nlp"].usage_ratio == pytest.approx(0.2, rel=0.01)
    assert report["vision"].over_request == pytest.approx(2 / 1.9, rel=0.01)

    (advice,) = workload_advice(tenant="nlp")
    assert (advice.workload, advice.advice.recommended_gpus) == ("big", 2)
    assert advice.advice.saving_gpus == 6


def test_shared_pods_are_charged_their_share_of_a_time_sliced_gpu() -> None:
    factories.nodes(1, "t4-2gpu")
    owner = factories.tenant("serving")
    factories.workload(owner, "a", pods=2, gpu_milli=500)
    database_cycle(Framework(load_profile("topology"))).run_once()
    Allocation.objects.update(bound_at=timezone.now() - timedelta(hours=1))
    for pod in Pod.objects.all():  # DCGM repeats the GPU's 0.6 for each pod on it
        minutes("serving", pod.name, used=0.6)
    report = tenant_efficiency(window=timedelta(hours=1))["serving"]
    assert report.requested_gpus == pytest.approx(1.0, rel=0.01)
    assert report.used_p95_gpus == pytest.approx(0.6)


def test_no_telemetry_means_no_index_and_a_pessimistic_ratio() -> None:
    factories.tenant("quiet")
    report = tenant_efficiency()["quiet"]
    assert (report.over_request, report.usage_ratio) == (None, 1.0)


def test_the_queue_status_reads_the_ratios_once_per_max_age(settings) -> None:
    """recent_usage_ratios: readers within USAGE_RATIOS_MAX_AGE_S share one read, later ones see
    what changed."""
    factories.nodes(2)
    nlp = factories.tenant("nlp")
    factories.workload(nlp, "big", pods=1, gpus=8)
    database_cycle(Framework(load_profile("topology"))).run_once()
    Allocation.objects.update(bound_at=timezone.now() - timedelta(hours=1))
    settings.USAGE_RATIOS_MAX_AGE_S = 0.0
    assert recent_usage_ratios() == {"nlp": 1.0}  # no telemetry yet: pessimistic

    settings.USAGE_RATIOS_MAX_AGE_S = 3600.0
    assert recent_usage_ratios() == {"nlp": 1.0}
    minutes("nlp", Pod.objects.get(workload__name="big").name, used=1.6)
    assert recent_usage_ratios() == {"nlp": 1.0}  # read within the max age: the same

    settings.USAGE_RATIOS_MAX_AGE_S = 0.0
    assert recent_usage_ratios()["nlp"] == pytest.approx(0.2, rel=0.01)
