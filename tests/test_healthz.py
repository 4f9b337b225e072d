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
    response = client.get("/")

    assert response.status_code == 200
    assert b"gpusched" in response.content
