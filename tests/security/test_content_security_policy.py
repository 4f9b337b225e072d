"""Every response carries the Content-Security-Policy (gpusched/content_security_policy.py), and
the pages an admin opens, the API docs included, run under it: Chromium reports no violation."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from tests.dashboard.servers import web_server
from tests.dashboard.test_e2e import in_thread
from tests.scheduling import factories
from tests.support.accounts import make_admin

CHROMIUM = "/usr/bin/chromium"


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/login/", "/api/docs/", "/api/schema/", "/healthz", "/metrics"])
def test_every_response_carries_the_policy(path: str) -> None:
    response = Client().get(path)
    assert response.status_code == 200
    policy = response["Content-Security-Policy"]
    assert policy == settings.CONTENT_SECURITY_POLICY
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["script-src"] == "'self'"  # no inline script, no eval, no other host
    assert directives["object-src"] == "'none'" and directives["frame-ancestors"] == "'none'"


def test_the_api_docs_page_has_no_inline_script() -> None:
    page = Client().get("/api/docs/").content.decode()
    assert "<script>" not in page.replace(" ", "")
    assert '<script src="' in page


@pytest.fixture
def chromium() -> Iterator[Any]:
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed")
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"], headless=True
        )
        try:
            yield browser
        finally:
            browser.close()


def staff_with_password() -> None:
    admin = make_admin("admin")
    admin.set_password("csp-password-1")
    admin.save()
    factories.nodes(2)


@pytest.mark.django_db(transaction=True)
def test_the_pages_an_admin_opens_run_under_the_policy(chromium: Any, tmp_path: Path) -> None:
    in_thread(staff_with_password)
    with web_server(log=tmp_path / "web.log") as base:
        page = chromium.new_page()
        violations: list[str] = []
        page.on(
            "console",
            lambda message: (
                violations.append(message.text)
                if "Content Security Policy" in message.text
                else None
            ),
        )
        page.goto(f"{base}/login/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "csp-password-1")
        page.click("button[type=submit]")
        page.wait_for_selector("article.node-card svg.topo")
        page.wait_for_selector("#live-status[data-state=live]")  # the socket: connect-src
        for path in ("/queues/", "/tenants/", "/placements/", "/admin/"):
            page.goto(f"{base}{path}")
            page.wait_for_load_state("networkidle")
        page.goto(f"{base}/api/docs/")
        page.wait_for_selector(".swagger-ui .info")  # Swagger UI ran: its script was allowed
        assert violations == []
