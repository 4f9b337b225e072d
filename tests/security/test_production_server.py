"""A production web process (debug off) as it runs behind a TLS-terminating proxy: `runweb` serving
gpusched.asgi on the test database, its static files collected first into a folder of its own, the
proxy's `X-Forwarded-Proto: https` trusted. Requests without that header are plain HTTP."""

from __future__ import annotations

import gzip
import http.client
import re
from collections.abc import Iterator
from dataclasses import dataclass
from http.cookies import SimpleCookie
from urllib.parse import urlencode, urlsplit

import pytest

from tests.dashboard.servers import web_server
from tests.security.production import ROOT, manage, production_env
from tests.support.accounts import make_admin

# All tests of the module in one group: pytest-django runs transactional tests after the others,
# and splitting the module would start the server twice. (The server needs committed rows.)
pytestmark = pytest.mark.django_db(transaction=True)

HTTPS = {"X-Forwarded-Proto": "https"}
A_YEAR = 365 * 24 * 3600


@dataclass
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def cookie(self, name: str) -> SimpleCookie:
        """The Set-Cookie header of that cookie, parsed (attributes included)."""
        for header in self.headers.get_all("Set-Cookie") or []:
            if header.startswith(f"{name}="):
                return SimpleCookie(header)
        raise AssertionError(f"no Set-Cookie for {name}: {self.headers}")


def fetch(
    base: str, path: str, method: str = "GET", headers: dict[str, str] | None = None, body: str = ""
) -> Reply:
    """One request, redirects not followed (http.client: urllib would follow them)."""
    url = urlsplit(base)
    connection = http.client.HTTPConnection(url.hostname or "", url.port, timeout=10)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        response = connection.getresponse()
        return Reply(response.status, response.headers, response.read())
    finally:
        connection.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, django_db_setup: None) -> Iterator[str]:
    static_root = tmp_path_factory.mktemp("static")
    production = {
        "GPUSCHED_DEBUG": "0",
        "GPUSCHED_STATIC_ROOT": str(static_root),
        "GPUSCHED_SECURE_PROXY_SSL_HEADER": "1",
    }
    collected = manage("collectstatic", "--noinput", env=production_env(**production))
    assert collected.returncode == 0, collected.stderr
    with web_server(environment=production) as base:
        yield base


def test_plain_http_is_redirected_to_https_except_for_probes(server: str) -> None:
    reply = fetch(server, "/login/")
    assert reply.status == 301
    assert reply.headers["Location"] == f"https://{urlsplit(server).netloc}/login/"
    assert fetch(server, "/healthz").status == 200  # what kubelet and compose health checks ask


def test_https_responses_carry_the_security_headers(server: str) -> None:
    reply = fetch(server, "/login/", headers=HTTPS)
    assert reply.status == 200
    assert reply.headers["Strict-Transport-Security"] == (
        f"max-age={A_YEAR}; includeSubDomains; preload"
    )
    assert reply.headers["X-Frame-Options"] == "DENY"
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert reply.headers["Referrer-Policy"] == "same-origin"


def test_session_and_csrf_cookies_are_secure_and_the_session_cookie_http_only(
    server: str,
) -> None:
    admin = make_admin("admin")
    admin.set_password("a-long-password-1")
    admin.save()

    page = fetch(server, "/login/", headers=HTTPS)
    csrf = page.cookie("csrftoken")["csrftoken"]
    assert csrf["secure"]

    form = {
        "username": "admin",
        "password": "a-long-password-1",
        "csrfmiddlewaretoken": csrf.value,
    }
    signed_in = fetch(
        server,
        "/login/",
        "POST",
        headers={
            **HTTPS,
            "Origin": f"https://{urlsplit(server).netloc}",
            "Cookie": f"csrftoken={csrf.value}",
            "Content-Type": "application/x-www-form-urlencoded",
        },
        body=urlencode(form),
    )
    assert signed_in.status == 302, signed_in.body
    session = signed_in.cookie("sessionid")["sessionid"]
    assert session.value
    assert session["secure"] and session["httponly"]
    assert session["samesite"] == "Lax"


def test_static_files_are_served_hashed_compressed_and_cached_for_long(server: str) -> None:
    page = fetch(server, "/login/", headers=HTTPS).body.decode()
    match = re.search(r'href="(/static/dashboard/dashboard\.[0-9a-f]{12}\.css)"', page)
    assert match, page  # the template links the collected file's hashed name
    source = (ROOT / "dashboard" / "static" / "dashboard" / "dashboard.css").read_bytes()

    plain = fetch(server, match[1], headers=HTTPS)
    assert plain.status == 200
    assert plain.body == source
    assert plain.headers["Content-Type"].startswith("text/css")
    cache = plain.headers["Cache-Control"]
    assert "immutable" in cache and "public" in cache
    max_age = re.search(r"max-age=(\d+)", cache)
    assert max_age and int(max_age[1]) >= A_YEAR

    compressed = fetch(server, match[1], headers={**HTTPS, "Accept-Encoding": "gzip"})
    assert compressed.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(compressed.body) == source


def test_unknown_static_files_are_a_404(server: str) -> None:
    assert fetch(server, "/static/dashboard/no-such-file.css", headers=HTTPS).status == 404
