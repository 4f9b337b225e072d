"""The dashboard is for platform admins, route by route: every page and data URL, and every socket,
as listed by the URL configuration and the websocket routing, so a route added later is checked
too. (tests/dashboard/ checks the main pages and the Cluster socket as part of their behaviour.)"""

from __future__ import annotations

import re

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.test import Client
from django.urls import URLPattern, reverse

from dashboard.routing import websocket_urlpatterns
from dashboard.urls import urlpatterns
from tests.dashboard.conftest import admin_cookie, communicator, make_admin

# What a route's parameters are filled with: nothing needs to exist, the check comes first.
ARGUMENTS = {"name": "gpu-node-0", "pk": 1, "uid": "00000000-0000-4000-8000-000000000000"}
# Signing in and out is open to anyone, of course.
OPEN = {"login", "logout"}


def page_urls() -> list[tuple[str, str]]:
    """Every dashboard route and the method it answers: the admin actions take POST only."""
    urls = []
    for pattern in urlpatterns:
        assert isinstance(pattern, URLPattern)
        if pattern.name in OPEN:
            continue
        kwargs = {name: ARGUMENTS[name] for name in pattern.pattern.converters}
        method = "post" if pattern.callback.__module__ == "dashboard.actions" else "get"
        urls.append((reverse(f"dashboard:{pattern.name}", kwargs=kwargs), method))
    return urls


def socket_paths() -> list[str]:
    return [
        re.sub(r"<(?:\w+:)?(\w+)>", lambda m: str(ARGUMENTS[m[1]]), str(pattern.pattern))
        for pattern in websocket_urlpatterns
    ]


@pytest.mark.django_db
def test_every_page_sends_visitors_to_sign_in_and_refuses_non_admins() -> None:
    urls = page_urls()
    assert len(urls) >= 6
    non_admin = Client()
    non_admin.force_login(make_admin("tenant-user", staff=False))
    for url, method in urls:
        response = getattr(Client(), method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/login/?next="), url
        assert getattr(non_admin, method)(url).status_code == 403, url


@pytest.mark.django_db(transaction=True)
async def test_every_socket_refuses_visitors_and_non_admins() -> None:
    paths = socket_paths()
    assert len(paths) >= 5
    non_admin = await admin_cookie("tenant-user", staff=False)
    try:
        for path in paths:
            for cookie in (None, non_admin):
                socket = communicator(path, cookie)
                connected, _ = await socket.connect(timeout=5)
                assert not connected, (path, cookie)
    finally:
        # The sessions were read on sync_to_async's thread: PostgreSQL cannot drop a test
        # database that a connection still uses.
        await sync_to_async(connections.close_all)()
