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
