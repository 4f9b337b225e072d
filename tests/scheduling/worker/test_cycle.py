from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from scheduling.core.queueing.backfill import DEFAULT_STARVING_AFTER_S
from scheduling.core.scheduler import Framework
from scheduling.models import Allocation, Gpu, Pod
from scheduling.profile_files import load_profile
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def worker(identity: str = "w1", **kwargs: object) -> SchedulingCycle:
    return database_cycle(Framework(load_profile("topology")), identity=identity, **kwargs)  # type: ignore[arg-type]


def test_one_cycle_admits_places_and_binds() -> None:
    factories.nodes(2)
    owner = factories.tenant()
    factories.workload(owner, "train", pods=2, gpus=4)
    factories.workload(owner, "share", pods=4, gpu_milli=250)
    report = worker().run_once()
    assert (report.leading, report.admitted, report.attempted, report.bound) == (True, 2, 6, 6)
    assert set(Pod.objects.values_list("phase", flat=True)) == {"Bound"}
    # The 4 shares pack onto one GPU (best fit), the two 4-GPU pods fill a NUMA node each.
    assert Gpu.objects.filter(used_milli=1000).count() == 9


def test_a_standby_does_nothing_while_the_leader_holds_the_lease() -> None:
    factories.nodes(1)
    factories.workload(factories.tenant(), "a", gpus=1)
    assert worker("leader").run_once().leading
    factories.workload(factories.tenant(), "b", gpus=1)
    report = worker("standby").run_once()
    assert not report.leading and report.attempted == 0
    assert Pod.objects.filter(phase="Pending").count() == 1


def test_a_standby_takes_over_when_the_lease_expires() -> None:
    factories.nodes(1)
    worker("leader", lease_duration_s=5).run_once()
    factories.workload(factories.tenant(), "b", gpus=1)
    later = timezone.now() + timedelta(seconds=6)
    report = worker("standby", lease_duration_s=5, clock=lambda: later).run_once()
    assert report.leading and report.bound == 1


def test_batches_continue_until_everything_fits_or_waits() -> None:
    factories.nodes(1)
    factories.workload(factories.tenant(), "many", pods=12, gpus=1)
    w = worker(batch_size=5)
    reports = [w.run_once() for _ in range(4)]
    assert [r.more for r in reports][:2] == [True, True]
    assert Pod.objects.filter(phase="Bound").count() == 8
    assert Pod.objects.filter(phase="Pending").exclude(last_reason="").count() == 4
    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 8000


def test_new_leader_releases_expired_reservations_and_keeps_bound_pods() -> None:
    (node,) = factories.nodes(1)
    owner = factories.tenant()
    factories.workload(owner, "bound", gpus=1)
    worker("old").run_once()
    stale = factories.workload(owner, "stale", gpus=0).pods.get()
    reservation = Allocation.objects.create(
        pod=stale, node=node, state="reserved", expires_at=timezone.now() - timedelta(seconds=1)
    )
    bound_before = Allocation.objects.get(pod__workload__name="bound")
    later = timezone.now() + timedelta(seconds=20)
    report = worker("new", clock=lambda: later).run_once()
    assert report.reconciled == 1
    reservation.refresh_from_db()
    assert (reservation.state, reservation.release_reason) == ("released", "reservation expired")
    assert Allocation.objects.get(pod__workload__name="bound", active=True) == bound_before
    # The released pod went back to the queue and was placed again in the same cycle.
    assert Pod.objects.get(pk=stale.pk).phase == "Bound"


def test_the_starvation_bound_is_the_admins_setting(settings) -> None:
    """GPUSCHED_STARVING_AFTER_S reaches the cycle on either side (database_cycle and runkube build
    the same SchedulingCycle); its default is the core's, and 0 turns it off."""
    assert settings.SCHEDULER_STARVING_AFTER_S == DEFAULT_STARVING_AFTER_S
    assert worker().starving_after_s == DEFAULT_STARVING_AFTER_S
    settings.SCHEDULER_STARVING_AFTER_S = 3600.0
    assert worker().starving_after_s == 3600.0
    settings.SCHEDULER_STARVING_AFTER_S = 0.0
    assert worker().starving_after_s is None
