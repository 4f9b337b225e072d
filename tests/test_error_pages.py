"""Unknown paths and crashes (gpusched/error_pages.py): pages in the dashboard's look outside
/api/, the API's JSON error shape inside it, in production and in debug mode (the demo); and the
dashboard's navigation to the API docs and the admin."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings


def staff_client() -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    return client


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_an_unknown_page_is_the_dashboards_404(debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = staff_client().get("/no/such/page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
    page = response.content.decode()
    assert "Page not found" in page and "<code>/no/such/page/</code>" in page
    assert 'class="topbar"' in page and "dashboard/dashboard.css" in page
    assert 'href="/api/docs/"' in page
    assert "Using the URLconf" not in page  # not Django's technical page


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_an_unknown_api_path_keeps_the_json_error(debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = Client().get("/api/v1/no-such-resource")
    assert response.status_code == 404
    assert response.json() == {"message": "Not found.", "extra": {}}


@pytest.mark.django_db
@pytest.mark.parametrize("debug", [False, True], ids=["production", "debug"])
def test_a_missing_object_of_a_dashboard_page_is_the_404_page_too(debug: bool) -> None:
    with override_settings(DEBUG=debug):
        response = staff_client().get("/nodes/no-such-node/")
    assert response.status_code == 404
    assert "Page not found" in response.content.decode()


@pytest.mark.django_db
@pytest.mark.urls("tests.error_pages_urls")
def test_a_crash_is_the_dashboards_500_page_or_the_apis_json() -> None:
    client = Client(raise_request_exception=False)
    response = client.get("/crash/")
    assert response.status_code == 500
    page = response.content.decode()
    assert "Something went wrong" in page and 'class="topbar"' in page
    assert "a bug" not in page and "RuntimeError" not in page  # nothing of the internals
    response = client.get("/api/v1/crash")
    assert response.status_code == 500
    assert response.json() == {"message": "Internal server error.", "extra": {}}


@pytest.mark.django_db
def test_the_navigation_links_the_api_docs_and_the_admin_for_staff() -> None:
    page = staff_client().get("/placements/").content.decode()
    assert 'href="/api/docs/"' in page and 'href="/admin/"' in page
    signed_out = Client().get("/login/").content.decode()
    assert 'href="/admin/"' not in signed_out
