from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from sim.kubernetes.simulated import SimulatedKubernetes

# Objects the tests add get this creation time, as the stand-in API of these tests always gave.
CREATED = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def fake() -> Iterator[SimulatedKubernetes]:
    """The simulated Kubernetes API, with watches cut short so a scheduler step returns at once,
    recording the requests, Bindings and status patches it gets."""
    server = SimulatedKubernetes(clock=lambda: CREATED, watch_linger_s=0.05, record=True).start()
    server.add_namespace("gpu-system")  # where deploy/ installs gpusched (its Lease lives there)
    yield server
    server.close()
