"""Evicting thousands of pods (issue 33): work proportional to the pods, in bounded transactions
that cannot deadlock with a tenant's cancel of one of the victims (one lock order:
scheduling/services/evictions.py)."""

import threading
import time
from collections.abc import Callable

import pytest
from django.db import connection
from django.db.models import Sum
from django.utils import timezone

from api import services as api_services
from scheduling import services
from scheduling.models import Allocation, Gpu, Node, Pod, Workload
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


def concurrently(**actions: Callable[[], object]) -> dict[str, float]:
    """Run the actions on threads of their own, started together; the seconds each took. Any
    error (a DeadlockDetected) fails the test."""
    errors: list[BaseException] = []
    took: dict[str, float] = {}

    def run(name: str, action: Callable[[], object]) -> None:
        start = time.monotonic()
        try:
            action()
        except BaseException as error:  # the test reports it below
            errors.append(error)
        finally:
            took[name] = time.monotonic() - start
            connection.close()

    threads = [threading.Thread(target=run, args=item) for item in actions.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert set(took) == set(actions), took  # both finished
    return took


def test_evicting_5000_pods_with_a_concurrent_cancel_finishes_both() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the deadlock and the quadratic statement were PostgreSQL's")
    factories.nodes(8)
    owner = factories.tenant()
    victims = [factories.workload(owner, f"cpu-{k}", pods=1250, cpu_milli=100) for k in range(4)]
    bind_everything()
    assert Pod.objects.filter(phase=Pod.Phase.BOUND).count() == 5000
    cancelled = Workload.objects.select_related("tenant").get(pk=victims[2].pk)

    took = concurrently(
        evict=lambda: services.workloads_evict(
            workloads=victims, reason="make room", now=timezone.now()
        ),
        cancel=lambda: services.workload_cancel(workload=cancelled),
    )

    assert took["evict"] <= EVICTION_BOUND_S, took
    assert Workload.objects.get(pk=victims[2].pk).state == Workload.State.CANCELLED
    others = Workload.objects.exclude(pk=victims[2].pk)
    assert set(others.values_list("state", flat=True)) == {Workload.State.PENDING}
    assert_nothing_held()


def assert_nothing_held() -> None:
    assert not Pod.objects.filter(phase__in=Pod.PLACED_PHASES).exists()
    assert not Allocation.objects.filter(active=True).exists()
    assert Node.objects.aggregate(total=Sum("cpu_used_milli"))["total"] == 0
    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 0


@pytest.mark.slow  # 800 pods bound before the race: 15-60 s on the shared 2-core machine
def test_a_drain_with_a_concurrent_cancel_and_finish_on_the_node_finishes_all() -> None:
    """A drain of a node holding 800 pods while a tenant cancels one of its workloads and
    another's pods end: the drain's cordon commits before its evictions (the node row it locks
    came before the workloads while both were one transaction, and a cancel, holding its
    workload and waiting for the node's counters, deadlocked with it), and the counters are
    locked in one order by every writer."""
    if connection.vendor != "postgresql":
        pytest.skip("row locks are PostgreSQL's")
    (node,) = factories.nodes(1)
    owner = factories.tenant()
    victims = [
        factories.workload(owner, f"cpu-{k}", pods=200, cpu_milli=100, gpu_milli=10 * (k % 2))
        for k in range(4)
    ]
    bind_everything()
    assert Pod.objects.filter(phase=Pod.Phase.BOUND).count() == 800
    cancelled = Workload.objects.select_related("tenant").get(pk=victims[3].pk)
    ending = list(
        Pod.objects.filter(workload=victims[1]).select_related("workload__tenant").order_by("-id")
    )

    concurrently(
        drain=lambda: api_services.node_drain(node=node, actor="admin"),
        cancel=lambda: services.workload_cancel(workload=cancelled),
        finish=lambda: services.pods_finish(pods=ending, now=timezone.now()),
    )

    assert Node.objects.get(pk=node.pk).cordoned
    assert Workload.objects.get(pk=victims[3].pk).state == Workload.State.CANCELLED
    assert_nothing_held()
