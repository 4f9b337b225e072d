"""CSRF protection where a browser's cookies authenticate: the dashboard's forms (sign in, sign out)
and REST API writes made with a session. Bearer tokens are not sent by browsers on their own, so
API writes with a token need no CSRF token."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.test import Client
from rest_framework.test import APIClient

from api import services as api_services
from scheduling.models import Node
from tests.scheduling import factories
from tests.support.accounts import make_admin

pytestmark = pytest.mark.django_db

PASSWORD = "a-long-password-1"


def csrf_token(client: Client) -> str:
    """The token a page gives the browser (its cookie, which the forms also carry)."""
    client.get("/login/")
    return client.cookies[settings.CSRF_COOKIE_NAME].value


def test_signing_in_needs_the_csrf_token() -> None:
    admin = make_admin("admin")
    admin.set_password(PASSWORD)
    admin.save()
    client = Client(enforce_csrf_checks=True)
    credentials = {"username": "admin", "password": PASSWORD}

    assert client.post("/login/", credentials).status_code == 403
    assert client.get("/").status_code == 302  # still signed out

    response = client.post("/login/", {**credentials, "csrfmiddlewaretoken": csrf_token(client)})
    assert response.status_code == 302 and response["Location"] == "/"
    assert client.get("/").status_code == 200


def test_signing_out_needs_the_csrf_token() -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(make_admin("admin"))

    assert client.post("/logout/").status_code == 403
    assert client.get("/").status_code == 200  # still signed in

    response = client.post("/logout/", {"csrfmiddlewaretoken": csrf_token(client)})
    assert response.status_code == 302
    assert client.get("/").status_code == 302


def test_api_writes_with_a_session_need_the_csrf_token() -> None:
    (node,) = factories.nodes(1)
    client = APIClient(enforce_csrf_checks=True)
    client.force_login(make_admin("admin"))
    cordon = f"/api/v1/admin/nodes/{node.name}/cordon"

    refused = client.post(cordon)
    assert refused.status_code == 403
    assert "CSRF" in refused.json()["message"]
    assert set(refused.json()) == {"message", "extra"}
    assert not Node.objects.get(pk=node.pk).cordoned

    assert client.post(cordon, HTTP_X_CSRFTOKEN=csrf_token(client)).status_code == 200
    assert Node.objects.get(pk=node.pk).cordoned


def test_api_writes_with_a_bearer_token_need_no_csrf_token() -> None:
    (node,) = factories.nodes(1)
    _, token = api_services.token_create(user=make_admin("admin"))
    client = APIClient(enforce_csrf_checks=True)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")

    assert client.post(f"/api/v1/admin/nodes/{node.name}/cordon").status_code == 200
    assert Node.objects.get(pk=node.pk).cordoned
