"""Unknown paths, crashes and database timeouts (gpusched/error_pages.py): pages in the dashboard's
look outside /api/, the API's JSON error shape inside it, in production and in debug mode (the
demo); and the dashboard's navigation to the API docs and the admin."""

from __future__ import annotations

import psycopg
import pytest
from django.contrib.auth.models import User
from django.db import connection
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


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_page_whose_query_hits_the_lock_timeout_is_a_503_with_retry_after() -> None:
    """A lock held by another connection (a stopped scheduler mid-transaction) costs a page the
    lock timeout and a 503 the browser may retry, not a 500 or a hung request thread."""
    if connection.vendor != "postgresql":
        pytest.skip("lock timeouts are PostgreSQL's (run with DATABASE_URL on PostgreSQL)")
    client = staff_client()
    db = connection.settings_dict
    holder = psycopg.connect(
        dbname=db["NAME"],
        user=db["USER"],
        password=db["PASSWORD"] or None,
        host=db["HOST"],
        port=db["PORT"] or None,
    )
    try:
        holder.execute("LOCK TABLE scheduling_tenant IN ACCESS EXCLUSIVE MODE")  # not committed
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '100ms'")
        response = client.get("/tenants/")
    finally:
        holder.rollback()
        holder.close()
        with connection.cursor() as cursor:
            cursor.execute("RESET lock_timeout")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    page = response.content.decode()
    assert "The database is busy" in page and 'class="topbar"' in page
    # The lock released, the same page answers.
    assert client.get("/tenants/").status_code == 200
