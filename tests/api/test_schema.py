"""The OpenAPI schema is valid, documents every endpoint, and the API keeps to it: schemathesis
sends generated requests to every operation (a few examples each) and checks that none gets a
5xx, every response's status, content type and body match the schema, and the schema is exactly
as strict as the server: every request it forbids is refused (ST201) and every request it allows
is accepted (ST202), or refused with a 422 for what it names (an unknown queue, more GPUs than any
node has: what a schema cannot say)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import schemathesis
import yaml
from django.contrib.auth.models import User
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from drf_spectacular.validation import validate_schema
from hypothesis import HealthCheck, settings
from rest_framework.test import APIClient
from schemathesis.checks import not_a_server_error
from schemathesis.config import SchemathesisConfig
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    positive_data_acceptance,
    response_schema_conformance,
    status_code_conformance,
)

from api import services as api_services
from gpusched.wsgi import application

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_schema_is_valid_openapi_3(db: None) -> None:
    response = APIClient().get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    validate_schema(schema)
    assert schema["openapi"].startswith("3.")
    paths = schema["paths"]
    assert "/api/v1/workloads" in paths and set(paths["/api/v1/workloads"]) >= {"get", "post"}
    assert "/api/v1/admin/nodes/{name}/drain" in paths
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    # Nested HackSoft serializers get distinct component names.
    assert "WorkloadCreateInputRequest" in schema["components"]["schemas"]
    # What the server refuses as blank after trimming, the schema refuses too.
    gpu_model = schema["components"]["schemas"]["ShortPodTemplateRequest"]["properties"]
    assert gpu_model["gpuModels"]["items"]["pattern"] == r"\S"


def test_docs_page(db: None) -> None:
    response = APIClient().get("/api/docs/")
    assert response.status_code == 200
    assert b"swagger" in response.content.lower()


CONFIG = SchemathesisConfig.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
            }
        },
        "generation": {"mode": "all"},
    }
)
schema = schemathesis.openapi.from_wsgi("/api/schema/", application, config=CONFIG)


@pytest.fixture
def bearer(db: None, cluster) -> Iterator[dict[str, str]]:
    """A tenant's token for tenant operations, an admin's for admin ones. Requests go straight to
    the WSGI application, so (as Django's test client does) the per-request connection closing is
    switched off: the test's transaction must survive them."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    _, _, tenant_token = api_services.tenant_onboard(name="team-a", quota={"nvidia.com/gpu": "64"})
    admin = User.objects.create_user("admin", password="pw", is_staff=True)
    _, admin_token = api_services.token_create(user=admin)
    try:
        yield {"tenant": tenant_token, "admin": admin_token}
    finally:
        request_started.connect(close_old_connections)
        request_finished.connect(close_old_connections)


@schema.parametrize()
@settings(
    max_examples=int(os.environ.get("GPUSCHED_SCHEMATHESIS_EXAMPLES", "12")),
    deadline=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
    database=None,
)
def test_api_keeps_to_its_schema(case, bearer: dict[str, str]) -> None:
    role = "admin" if case.path.startswith("/api/v1/admin/") else "tenant"
    response = case.call(headers={"Authorization": f"Bearer {bearer[role]}"})
    case.validate_response(
        response,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            negative_data_rejection,
            positive_data_acceptance,
        ],
    )
