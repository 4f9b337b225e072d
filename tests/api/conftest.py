"""Fixtures for the REST API: tenants with tokens (made the way createtenant makes them), an admin,
a small cluster (8-GPU H100 nodes, time-sliced T4s, a MIG-partitioned A100) and the worker."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from rest_framework.test import APIClient

from api import selectors as api_selectors
from api import services as api_services
from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.types import SharingMode
from scheduling.models import Node, Tenant
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.builders import make_node

H100 = "NVIDIA-H100-80GB-HBM3"

LLAMA: dict[str, Any] = {
    "name": "llama-ft",
    "queueName": "team-a",
    "serviceClass": "batch",
    "podSets": [
        {
            "name": "workers",
            "count": 2,
            "minCount": 2,
            "template": {
                "resources": {"requests": {"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"}},
                "gpuModels": ["H100"],
                "topology": {"policy": "single-numa-node"},
            },
        }
    ],
}


@dataclass
class Caller:
    tenant: Tenant
    token: str
    client: APIClient


@pytest.fixture(autouse=True)
def _fresh_caches() -> Iterator[None]:
    cache.clear()  # throttle counters
    api_selectors.cluster._limits_cache.clear()
    yield
    cache.clear()


def client_for(token: str | None) -> APIClient:
    client = APIClient()
    if token is not None:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def onboard(name: str, **kwargs: Any) -> Caller:
    tenant, _, token = api_services.tenant_onboard(name=name, **kwargs)
    return Caller(tenant, token, client_for(token))


@pytest.fixture
def team_a(db: None) -> Caller:
    return onboard("team-a")


@pytest.fixture
def team_b(db: None) -> Caller:
    return onboard("team-b")


@pytest.fixture
def admin(db: None) -> APIClient:
    user = User.objects.create_user("admin", password="pw", is_staff=True)
    _, token = api_services.token_create(user=user)
    return client_for(token)


@pytest.fixture
def cluster(db: None) -> list[Node]:
    specs = [
        make_node("h100-0").topology("dgx-h100", model=H100, sharing=SharingMode.EXCLUSIVE).build(),
        make_node("h100-1").topology("dgx-h100", model=H100, sharing=SharingMode.EXCLUSIVE).build(),
        make_node("t4-0").gpus(2, "T4").build(),
        make_node("mig-0").mig(("1g.10gb", "1g.10gb", "3g.40gb"), model="A100").build(),
    ]
    return [services.node_register(spec=spec, source=Node.Source.SIMULATOR) for spec in specs]


def run_scheduler(cycles: int = 1) -> None:
    worker = database_cycle(Framework(load_profile("topology")), identity="api-tests")
    for _ in range(cycles):
        worker.run_once()


def submit(caller: Caller, body: dict[str, Any], **headers: Any) -> Any:
    return caller.client.post("/api/v1/workloads", body, format="json", **headers)
