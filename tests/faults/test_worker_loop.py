"""The worker loop (common/loop.py) and a database connection that dies under it."""

from __future__ import annotations

import psycopg
import pytest
from django.db import OperationalError, connection

from common.loop import LoopCommand
from tests.dashboard.servers import database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


class Probe(LoopCommand):
    """A worker whose step asks the database which server process serves it."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.steps = steps
        self.backends: list[int] = []
        self.waits: list[float] = []

    def step(self) -> float:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            row = cursor.fetchone()
        assert row is not None
        self.backends.append(int(row[0]))
        if len(self.backends) == 1:
            terminate(self.backends[0])  # what a server restart does to every session
        if len(self.backends) >= self.steps:
            self.shutdown = True
        return 0.0

    def sleep(self, seconds: float) -> None:
        """The loop's waits are recorded, not slept: the backoff is what it asked for."""
        self.waits.append(seconds)


def terminate(backend: int) -> None:
    with psycopg.connect(database_url(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", [backend])


@pytest.fixture(autouse=True)
def _postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("terminates a PostgreSQL session (runs in the PostgreSQL pass)")


def test_loop_survives_a_dead_connection_and_reconnects() -> None:
    """Fault: the session under a `--loop` worker is terminated between two steps.

    Expected: the next step fails on the database, the loop logs it, drops the dead connection,
    waits its first backoff (0.5 s) and goes on with a new session; the error is counted."""
    probe = Probe(steps=2)
    probe.run_loop(probe.step, loop=True)
    assert len(probe.backends) == 2 and probe.backends[0] != probe.backends[1]
    assert probe.failed_steps == 1
    assert probe.waits == [0.0, 0.5]  # more work, then the first backoff after the failed step


def test_once_raises_the_database_error() -> None:
    """With --once there is no next step: the error ends the command (a non-zero exit)."""
    probe = Probe(steps=1)
    probe.run_loop(probe.step, loop=False)
    with pytest.raises(OperationalError):
        probe.run_loop(probe.step, loop=False)
    connection.close()
