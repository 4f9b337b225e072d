"""/metrics is open to the Prometheus that scrapes it: it names tenants and queues, never an API
token or its digest."""

from __future__ import annotations

import pytest
from django.test import Client

from api import services as api_services
from api.authentication import token_digest
from tests.scheduling import factories
from tests.support.accounts import make_admin

pytestmark = pytest.mark.django_db


def test_metrics_show_no_api_token() -> None:
    factories.nodes(1)
    tenant, _, tenant_token = api_services.tenant_onboard(name="team-a")
    factories.workload(tenant, "train", gpus=4)
    _, admin_token = api_services.token_create(user=make_admin("admin"))

    response = Client().get("/metrics")
    assert response.status_code == 200
    body = response.content.decode()
    assert "team-a" in body  # the tenant is there, by name
    for token in (tenant_token, admin_token):
        assert token not in body
        assert token_digest(token) not in body
