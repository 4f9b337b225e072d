"""Fixtures for the whole-stack tests: the machine's PostgreSQL server and Redis (the URLs that
scripts/test.sh exports), and the Prometheus binary. A test that needs one that is absent skips."""

from __future__ import annotations

import os
import shutil
import socket
import urllib.parse

import pytest

POSTGRES_URL = os.environ.get("GPUSCHED_TEST_POSTGRES_URL", "")
REDIS_URL = os.environ.get("GPUSCHED_TEST_REDIS_URL", "")


def _reachable(url: str, default_port: int) -> bool:
    parts = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 2
        ):
            return True
    except OSError:
        return False


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    if not POSTGRES_URL:
        pytest.skip("GPUSCHED_TEST_POSTGRES_URL is not set (scripts/test.sh sets it)")
    if not _reachable(POSTGRES_URL, 5432):
        pytest.skip(f"PostgreSQL at {POSTGRES_URL} is not reachable")
    return POSTGRES_URL


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    if not REDIS_URL:
        pytest.skip("GPUSCHED_TEST_REDIS_URL is not set (scripts/test.sh sets it)")
    if not _reachable(REDIS_URL, 6379):
        pytest.skip(f"Redis at {REDIS_URL} is not reachable")
    return REDIS_URL


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("the prometheus binary is not installed (Debian package prometheus)")
    return binary
