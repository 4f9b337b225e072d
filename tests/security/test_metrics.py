"""/metrics names tenants and queues, never an API token or its digest; with GPUSCHED_METRICS_TOKEN
set only a scraper presenting it reads them; scrapes within GPUSCHED_METRICS_CACHE_S share one read
of the database."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from prometheus_client import generate_latest

from api import services as api_services
from api.authentication import token_digest
from gpusched import web_metrics
from gpusched.web_metrics import CachedExposition
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


@override_settings(METRICS_TOKEN="s3cret-scrape-token")
def test_with_a_token_set_metrics_answer_only_the_bearer_of_it() -> None:
    tenant, _, tenant_token = api_services.tenant_onboard(name="team-a")
    for headers in (
        {},
        {"Authorization": "Bearer wrong"},
        {"Authorization": f"Bearer {tenant_token}"},
        {"Authorization": "Basic s3cret-scrape-token"},
    ):
        refused = Client(headers=headers).get("/metrics")
        assert refused.status_code == 401, headers
        assert refused["WWW-Authenticate"].startswith("Bearer")
        assert b"team-a" not in refused.content
    served = Client(headers={"Authorization": "Bearer s3cret-scrape-token"}).get("/metrics")
    assert served.status_code == 200 and b"team-a" in served.content


@override_settings(METRICS_CACHE_S=5.0)
def test_scrapes_within_the_cache_window_read_the_database_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An empty cache: nothing an earlier test rendered.
    fresh = CachedExposition(lambda: generate_latest(web_metrics.registry))
    monkeypatch.setattr(web_metrics, "exposition", fresh)
    api_services.tenant_onboard(name="team-a")
    client = Client()
    with CaptureQueriesContext(connection) as queries:
        first = client.get("/metrics").content
        read_by_first = len(queries)
        second = client.get("/metrics").content
    assert read_by_first > 0
    assert len(queries) == read_by_first  # the second scrape read nothing
    assert second == first


def test_concurrent_scrapes_render_once_and_an_older_one_renders_again() -> None:
    now = [100.0]
    renders: list[int] = []
    rendering = threading.Event()
    release = threading.Event()

    def render() -> bytes:
        renders.append(1)
        rendering.set()
        release.wait(timeout=10)
        return f"render {len(renders)}".encode()

    cache = CachedExposition(render, clock=lambda: now[0])
    bodies: list[bytes] = []
    scrapers = [threading.Thread(target=lambda: bodies.append(cache.get(5.0))) for _ in range(3)]
    scrapers[0].start()
    assert rendering.wait(timeout=10)
    for scraper in scrapers[1:]:
        scraper.start()
    release.set()
    for scraper in scrapers:
        scraper.join(timeout=10)
    assert bodies == [b"render 1"] * 3 and len(renders) == 1
    now[0] += 4.9
    assert cache.get(5.0) == b"render 1"
    now[0] += 0.1
    assert cache.get(5.0) == b"render 2"
