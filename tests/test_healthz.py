import pytest
from django.test import Client


@pytest.mark.django_db
def test_healthz_reports_ok(client: Client) -> None:
    response = client.get("/healthz")

    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"status": "ok"}


def test_healthz_refuses_writes(client: Client) -> None:
    assert client.post("/healthz").status_code == 405


@pytest.mark.django_db
def test_home_page_renders(client: Client) -> None:
    # The home page is the admin dashboard: signed out, it leads to the sign-in page.
    response = client.get("/", follow=True)

    assert response.status_code == 200
    assert response.redirect_chain[-1][0].startswith("/login/")
    assert b"gpusched" in response.content
