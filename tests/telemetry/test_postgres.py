"""The telemetry writes and reads on PostgreSQL, the production database.

The upserts and the rollups are hand-written SQL (ON CONFLICT, window functions) that must
behave the same on both backends, so the service, selector and worker tests run again, in a
subprocess whose DATABASE_URL points at GPUSCHED_TEST_POSTGRES_URL's server.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

POSTGRES_URL = os.environ.get("GPUSCHED_TEST_POSTGRES_URL", "")
ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(not POSTGRES_URL, reason="GPUSCHED_TEST_POSTGRES_URL is not set"),
]


def test_services_selectors_and_worker_on_postgresql() -> None:
    # A database name of our own: pytest-django creates and drops "test_gpusched_telemetry".
    url = urlunsplit(urlsplit(POSTGRES_URL)._replace(path="/gpusched_telemetry"))
    env = {**os.environ, "DATABASE_URL": url, "GPUSCHED_TEST_NO_PROMETHEUS": "1"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--create-db",
            "tests/telemetry/test_services.py",
            "tests/telemetry/test_selectors.py",
            "tests/telemetry/test_ingesttelemetry.py",  # its Prometheus test is skipped there
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    assert " passed" in result.stdout
