"""Evicting thousands of pods (issue 33): work proportional to the pods, in bounded transactions
that cannot deadlock with a tenant's cancel of one of the victims (one lock order:
scheduling/services/evictions.py)."""

import threading
import time

import pytest
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from scheduling import services
from scheduling.models import Allocation, Node, Pod, Workload
from tests.scheduling import factories
from tests.scheduling.test_services import schedule_pending

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

# Issue 33's done-when: 5,000 pods evicted in one cycle in at most 10 s (it took 264.8 s when
# each pod was a CASE branch of one UPDATE). The bound is the issue's own, and generous: linear
# work does this in a fraction of it on the 2-core test machine.
EVICTION_BOUND_S = 10.0


def bind_everything() -> None:
    while Pod.objects.filter(phase=Pod.Phase.PENDING).exists():
        cluster, decisions = schedule_pending()
        placed = [(pod, d) for pod, d in decisions if d.placement is not None]
        assert placed, "the pods must fit"
        services.placements_commit(
            cluster=cluster, placed=placed, scheduler="s", now=timezone.now()
        )


def test_evicting_5000_pods_with_a_concurrent_cancel_finishes_both() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the deadlock and the quadratic statement were PostgreSQL's")
    factories.nodes(8)
    owner = factories.tenant()
    victims = [factories.workload(owner, f"cpu-{k}", pods=1250, cpu_milli=100) for k in range(4)]
    bind_everything()
    assert Pod.objects.filter(phase=Pod.Phase.BOUND).count() == 5000
    errors: list[BaseException] = []
    took: dict[str, float] = {}

    def run(name: str, action: object) -> None:
        start = time.monotonic()
        try:
            action()  # type: ignore[operator]
        except BaseException as error:  # the test reports it below
            errors.append(error)
        finally:
            took[name] = time.monotonic() - start
            connection.close()

    evict = threading.Thread(
        target=run,
        args=(
            "evict",
            lambda: services.workloads_evict(
                workloads=victims, reason="make room", now=timezone.now()
            ),
        ),
    )
    cancelled = Workload.objects.select_related("tenant").get(pk=victims[2].pk)
    cancel = threading.Thread(
        target=run, args=("cancel", lambda: services.workload_cancel(workload=cancelled))
    )
    evict.start()
    cancel.start()
    evict.join(60)
    cancel.join(60)

    assert not errors, errors
    assert took["evict"] <= EVICTION_BOUND_S, took
    assert Workload.objects.get(pk=victims[2].pk).state == Workload.State.CANCELLED
    others = Workload.objects.exclude(pk=victims[2].pk)
    assert set(others.values_list("state", flat=True)) == {Workload.State.PENDING}
    assert not Pod.objects.filter(phase__in=Pod.PLACED_PHASES).exists()
    assert not Allocation.objects.filter(active=True).exists()
    assert Node.objects.aggregate(total=Sum("cpu_used_milli"))["total"] == 0
