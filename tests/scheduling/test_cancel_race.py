"""A tenant's cancel and the scheduler's bind of the same pod, concurrently on PostgreSQL: whichever
commits first, nothing the bind took outlives the cancel (leaked, those GPUs would never be placed
again)."""

import threading

import pytest
from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from scheduling import services
from scheduling.models import Allocation, Gpu, Pod, Workload
from tests.scheduling import factories
from tests.scheduling.test_services import schedule_pending
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_a_cancel_while_a_bind_is_uncommitted_releases_what_the_bind_took() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes writers itself (IMMEDIATE transactions)")
    factories.nodes(1)
    workload = factories.workload(factories.tenant(), "a", pods=2, gpus=2)
    cluster, decisions = schedule_pending()
    bound = threading.Event()
    commit = threading.Event()

    def bind() -> None:
        with transaction.atomic():  # the bind done, its transaction still open
            services.placements_commit(
                cluster=cluster, placed=decisions, scheduler="s", now=timezone.now()
            )
            bound.set()
            commit.wait(10)
        connection.close()

    def cancel() -> None:
        services.workload_cancel(
            workload=Workload.objects.select_related("tenant").get(pk=workload.pk)
        )
        connection.close()

    binder = threading.Thread(target=bind)
    binder.start()
    assert bound.wait(10)
    canceller = threading.Thread(target=cancel)
    canceller.start()
    # The bind commits only once the cancel has read what it reads (it then waits on the bind's
    # row locks) or is already done.
    wait_until(lambda: not canceller.is_alive() or waiting_on_a_lock(), timeout=10)
    commit.set()
    binder.join(10)
    canceller.join(10)

    assert set(Pod.objects.values_list("phase", flat=True)) == {Pod.Phase.CANCELLED}
    assert not Allocation.objects.filter(active=True).exists()
    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 0


def waiting_on_a_lock() -> bool:
    """Whether a session of this database waits on a lock another one holds."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        row = cursor.fetchone()
    return row is not None and row[0] > 0
