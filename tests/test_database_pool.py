"""GPUSCHED_DB_POOL_SIZE: the web role's threads share a few PostgreSQL connections.

Each case runs in a fresh interpreter, since the settings read the environment once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

POSTGRES_URL = os.environ.get("GPUSCHED_TEST_POSTGRES_URL", "")
ROOT = Path(__file__).resolve().parents[1]

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


def run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    scrubbed = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GPUSCHED_DB_") and k != "DATABASE_URL"
    }
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**scrubbed, "DJANGO_SETTINGS_MODULE": "gpusched.settings", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


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
