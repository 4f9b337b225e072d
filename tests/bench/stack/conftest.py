"""Fixtures for the whole-stack tests: the machine's PostgreSQL server and Redis (the URLs that
scripts/test.sh exports), and the Prometheus binary. A test that needs one that is absent skips."""

from __future__ import annotations

import os

import pytest

from bench.loopback import tcp_open
from tests.support.binaries import installed

POSTGRES_URL = os.environ.get("GPUSCHED_TEST_POSTGRES_URL", "")
REDIS_URL = os.environ.get("GPUSCHED_TEST_REDIS_URL", "")


def _server_url(url: str, env_name: str, default_port: int) -> str:
    if not url:
        pytest.skip(f"{env_name} is not set (scripts/test.sh sets it)")
    if not tcp_open(url, default_port):
        pytest.skip(f"{url} is not reachable")
    return url


@pytest.fixture(scope="session")
def postgres_server_url() -> str:
    return _server_url(POSTGRES_URL, "GPUSCHED_TEST_POSTGRES_URL", 5432)


@pytest.fixture(scope="session")
def redis_server_url() -> str:
    return _server_url(REDIS_URL, "GPUSCHED_TEST_REDIS_URL", 6379)


@pytest.fixture(scope="session")
def prometheus_binary() -> str:
    return installed("prometheus")
