"""The outbox is read by id, so ids must follow commit order even with concurrent writers."""

import threading
import time

import pytest
from django.db import connection, transaction

from scheduling import events
from scheduling.models import Event

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_a_writer_that_publishes_later_commits_later_and_gets_a_larger_id() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("SQLite serializes writers itself (IMMEDIATE transactions)")
    first_published = threading.Event()
    commits: dict[str, float] = {}

    def writer(name: str, hold_s: float, wait: threading.Event | None) -> None:
        if wait is not None:
            wait.wait(5)
        with transaction.atomic():
            events.publish(events.NodeChanged(node=name, cordoned=False, gpus=0))
            if wait is None:
                first_published.set()
            time.sleep(hold_s)
        commits[name] = time.monotonic()
        connection.close()

    first = threading.Thread(target=writer, args=("first", 0.5, None))
    second = threading.Thread(target=writer, args=("second", 0.0, first_published))
    first.start()
    second.start()
    first.join()
    second.join()
    ids = dict(Event.objects.filter(type="node.changed").values_list("payload__node", "id"))
    assert commits["second"] >= commits["first"]  # the second waited for the first to commit
    assert ids["second"] > ids["first"]
