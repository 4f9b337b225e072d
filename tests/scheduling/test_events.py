"""The outbox is read by id, so ids must follow commit order even with concurrent writers, and a
writer must not wait for another one's transaction to end before its own statements run."""

import random
import threading
import time

import pytest
from django.db import connection, transaction

from scheduling import events
from scheduling.models import Event

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def _postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes writers itself (IMMEDIATE transactions)")


def test_a_writer_that_commits_later_gets_larger_ids_without_holding_others_back() -> None:
    _postgresql_only()
    first_published = threading.Event()
    quick_committed = threading.Event()
    slow_saw_quick_commit: list[bool] = []

    def slow_writer() -> None:
        with transaction.atomic():
            events.publish(events.NodeChanged(node="slow", cordoned=False, gpus=0))
            first_published.set()
            # Its transaction stays open until the quick writer has committed: had the quick one
            # waited for this one to end, this wait would time out.
            slow_saw_quick_commit.append(quick_committed.wait(10))
        connection.close()

    def quick_writer() -> None:
        assert first_published.wait(10)
        with transaction.atomic():
            events.publish(events.NodeChanged(node="quick", cordoned=False, gpus=0))
        quick_committed.set()
        connection.close()

    slow = threading.Thread(target=slow_writer)
    quick = threading.Thread(target=quick_writer)
    slow.start()
    quick.start()
    slow.join()
    quick.join()
    ids = dict(Event.objects.filter(type="node.changed").values_list("payload__node", "id"))
    # The quick writer published after the slow one, but did not wait for it to commit...
    assert slow_saw_quick_commit == [True]
    # ...and its id says it committed first.
    assert ids["quick"] < ids["slow"]


def test_a_reader_tailing_by_id_sees_every_event_of_concurrent_writers_in_their_order() -> None:
    _postgresql_only()
    writers, transactions_each = 4, 6
    done = threading.Event()
    seen: list[tuple[int, str]] = []

    def writer(w: int) -> None:
        rng = random.Random(w)
        for t in range(transactions_each):
            with transaction.atomic():
                for k in range(3):
                    events.publish(events.NodeQuarantined(node=f"{w}.{t}.{k}"))
                    time.sleep(rng.uniform(0, 0.02))
        connection.close()

    def reader() -> None:
        cursor = 0
        while True:
            finished = done.is_set()
            for event_id, event in events.read_after(cursor):
                assert isinstance(event, events.NodeQuarantined)
                seen.append((event_id, event.node))
                cursor = event_id
            if finished:
                break
            time.sleep(0.005)
        connection.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    tail = threading.Thread(target=reader)
    tail.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done.set()
    tail.join()
    names = [name for _, name in seen]
    # Nothing missed, nothing twice: an id a reader passed can never commit after it.
    assert sorted(names) == sorted(
        f"{w}.{t}.{k}" for w in range(writers) for t in range(transactions_each) for k in range(3)
    )
    # Each transaction's events together and in publishing order.
    for index in range(0, len(names), 3):
        w, t, _ = names[index].split(".")
        assert names[index : index + 3] == [f"{w}.{t}.{k}" for k in range(3)]
