import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from api import services as api_services
from api.authentication import token_digest
from api.models import ApiToken
from tests.api.conftest import client_for

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_no_token_is_401_with_the_error_shape(db: None) -> None:
    response = APIClient().get("/api/v1/workloads")
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    assert set(response.json()) == {"message", "extra"}


@pytest.mark.parametrize(
    "header",
    ["Bearer gst_not-a-token", "Bearer", "Bearer two parts", "bearer \xff"],
)
def test_invalid_token_is_401(team_a, header: str) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/workloads")
    assert response.status_code == 401
    assert response.json()["message"]


def test_revoked_token_is_401(team_a) -> None:
    assert team_a.client.get("/api/v1/workloads").status_code == 200
    api_services.token_revoke(token=ApiToken.objects.get(tenant=team_a.tenant))
    response = team_a.client.get("/api/v1/workloads")
    assert response.status_code == 401
    assert response.json()["message"] == "Token revoked."


def test_tokens_are_stored_hashed(team_a) -> None:
    row = ApiToken.objects.get(tenant=team_a.tenant)
    assert row.digest == token_digest(team_a.token)
    assert team_a.token not in {row.digest, row.prefix, row.name}
    assert team_a.token.startswith(row.prefix) and len(row.prefix) < len(team_a.token) // 2
    # Nothing stored anywhere holds the token itself.
    assert not ApiToken.objects.filter(digest=team_a.token).exists()


def test_last_used_is_recorded(team_a) -> None:
    team_a.client.get("/api/v1/workloads")
    assert ApiToken.objects.get(tenant=team_a.tenant).last_used_at is not None


def test_tenant_token_cannot_use_admin_endpoints(team_a) -> None:
    response = team_a.client.get("/api/v1/admin/tenants")
    assert response.status_code == 403
    assert "admin" in response.json()["message"]


def test_admin_token_is_not_a_tenant(admin) -> None:
    assert admin.get("/api/v1/admin/tenants").status_code == 200
    assert admin.get("/api/v1/workloads").status_code == 403


def test_admin_by_session(db: None) -> None:
    User.objects.create_user("root", password="pw", is_staff=True)
    client = APIClient()
    assert client.login(username="root", password="pw")
    assert client.get("/api/v1/admin/nodes").status_code == 200


def test_non_staff_session_is_not_admin(db: None) -> None:
    User.objects.create_user("someone", password="pw")
    client = APIClient()
    assert client.login(username="someone", password="pw")
    assert client.get("/api/v1/admin/nodes").status_code == 403


def test_inactive_admin_token_is_401(db: None) -> None:
    user = User.objects.create_user("gone", password="pw", is_staff=True, is_active=False)
    _, token = api_services.token_create(user=user)
    assert client_for(token).get("/api/v1/admin/nodes").status_code == 401
