from collections.abc import Iterator

import pytest

from tests.kube.fakeapi import FakeKube


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    server = FakeKube().start()
    yield server
    server.close()
