"""GPUSCHED_DB_POOL_SIZE: the web role's threads share a few PostgreSQL connections.

Each case runs in a fresh interpreter (tests/fresh_settings.py).
"""

from __future__ import annotations

import json
import os

import pytest

from tests.fresh_settings import run

POSTGRES_URL = os.environ.get("GPUSCHED_TEST_POSTGRES_URL", "")

# What an ASGI web process does per request: its database work on a thread of its own, the
# connection closed when the request ends (Django's request_finished).
REQUESTS_ON_THREADS = """
import json, threading
import django
django.setup()
from django.db import connection

pids = []
def request():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        pids.append(cursor.fetchone()[0])
    connection.close()

for _ in range(30):
    thread = threading.Thread(target=request)
    thread.start()
    thread.join()
print(json.dumps({"requests": len(pids), "backends": len(set(pids))}))
"""


@pytest.mark.postgres
@pytest.mark.skipif(not POSTGRES_URL, reason="GPUSCHED_TEST_POSTGRES_URL is not set")
@pytest.mark.parametrize(("pool_size", "most_backends"), [("3", 3), ("0", 30)])
def test_requests_on_threads_of_their_own_share_the_pool(
    pool_size: str, most_backends: int
) -> None:
    result = run(REQUESTS_ON_THREADS, DATABASE_URL=POSTGRES_URL, GPUSCHED_DB_POOL_SIZE=pool_size)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["requests"] == 30
    if pool_size == "0":
        assert seen["backends"] == 30  # a connection opened and closed per request
    else:
        assert seen["backends"] <= most_backends


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"DATABASE_URL": "sqlite:////tmp/pool.sqlite3", "GPUSCHED_DB_POOL_SIZE": "4"},
            "GPUSCHED_DB_POOL_SIZE needs a PostgreSQL DATABASE_URL",
        ),
        (
            {"DATABASE_URL": "postgres://postgres@127.0.0.1:1/none", "GPUSCHED_DB_POOL_SIZE": "x"},
            "GPUSCHED_DB_POOL_SIZE must be a whole number >= 0, not 'x'",
        ),
        (
            {
                "DATABASE_URL": "postgres://postgres@127.0.0.1:1/none",
                "GPUSCHED_DB_POOL_SIZE": "4",
                "GPUSCHED_DB_CONN_MAX_AGE": "600",
            },
            "GPUSCHED_DB_POOL_SIZE and GPUSCHED_DB_CONN_MAX_AGE exclude each other",
        ),
    ],
)
def test_a_pool_that_cannot_work_is_refused_at_start(env: dict[str, str], message: str) -> None:
    result = run("import django; django.setup()", **env)
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and message in result.stderr


# A stopped process holding a lock (issue 33: a scheduler paused mid-transaction) and a
# connection the server dropped (pg_terminate_backend), as the web role's settings meet them.
STALLED_LOCK_AND_DROPPED_CONNECTION = """
import json, os, time
import django
django.setup()
import psycopg
from django.db import OperationalError, connection
table = f"lock_probe_{os.getpid()}"
with connection.cursor() as cursor:
    cursor.execute(f"CREATE TABLE {table} (id int)")
connection.close()
holder = psycopg.connect(os.environ["DATABASE_URL"])
holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")  # and never commits
start = time.monotonic()
try:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")
    refused = ""
except OperationalError as error:
    refused = type(error.__cause__).__name__
waited = time.monotonic() - start
connection.close()
holder.rollback()
with connection.cursor() as cursor:
    cursor.execute("SELECT pg_backend_pid()")
    pid = cursor.fetchone()[0]
connection.close()  # back to the pool
holder.execute("SELECT pg_terminate_backend(%s)", [pid])
holder.commit()
start = time.monotonic()
with connection.cursor() as cursor:  # the pool's check replaces the dropped connection
    cursor.execute(f"DROP TABLE {table}")
recovered = time.monotonic() - start
connection.close()
print(json.dumps({"refused": refused, "waited": waited, "recovered": recovered}))
"""


@pytest.mark.postgres
def test_a_stalled_lock_holder_costs_a_request_the_lock_timeout_and_a_reset_costs_nothing() -> None:
    if not POSTGRES_URL:
        pytest.skip("needs GPUSCHED_TEST_POSTGRES_URL")
    result = run(
        STALLED_LOCK_AND_DROPPED_CONNECTION,
        DATABASE_URL=POSTGRES_URL,
        GPUSCHED_DB_POOL_SIZE="2",
        GPUSCHED_DB_LOCK_TIMEOUT_MS="500",
        GPUSCHED_DB_STATEMENT_TIMEOUT_MS="10000",
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["refused"] == "LockNotAvailable"  # an OperationalError: the API's 503
    # The done-when bounds the stall by the lock timeout; 5 s of slack for a loaded
    # 2-core machine, far below the minutes a lock wait without a timeout lasts.
    assert seen["waited"] < 0.5 + 5
    # A dropped connection is replaced as it leaves the pool: the next request just works,
    # instead of the 7-14 s (and "couldn't get a connection after 30 s") of issue 33.
    assert seen["recovered"] < 5
