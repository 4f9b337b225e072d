from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import client_for


class Clock:
    """A settable clock for the store's timestamps and the kubelets."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def kube(clock: Clock) -> Iterator[SimulatedKubernetes]:
    """The simulated API with the real server's watch semantics (no early end)."""
    server = SimulatedKubernetes(clock=clock).start()
    server.add_namespace("ml-team")
    yield server
    server.close()


@pytest.fixture
def core(kube: SimulatedKubernetes) -> Any:
    return client_for(client.CoreV1Api, kube)
