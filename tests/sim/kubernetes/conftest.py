from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from sim.kubernetes.launch import SimulatedCluster
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import Clock, client_for
from tests.sim.kubernetes.running import start


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


@pytest.fixture
def sim(clock: Clock) -> Iterator[SimulatedCluster]:
    """The two-node cluster of tests/sim/kubernetes/running.py, kubelets and exporter included."""
    found = start(clock)
    yield found
    found.close()
