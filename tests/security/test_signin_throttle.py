"""Guessing passwords costs time: the dashboard's and the admin's sign-in are throttled per
username and per address (dashboard/signin.py). Before, 40 wrong passwords in 14 s were all
answered."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.cache import cache
from django.test import Client

from tests.support.accounts import make_admin

pytestmark = pytest.mark.django_db

PAGES = ["/login/", "/admin/login/"]


@pytest.fixture(autouse=True)
def _fresh_counters(settings) -> Iterator[None]:
    # What is tested is the counting; a fast hasher keeps 100 sign-ins quick.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    cache.clear()
    yield
    cache.clear()


def sign_in(page: str, username: str, password: str, address: str = "10.0.0.1") -> Any:
    client = Client(REMOTE_ADDR=address)
    return client.post(page, {"username": username, "password": password})


@pytest.mark.parametrize("page", PAGES)
def test_a_username_is_locked_after_ten_failures_even_with_the_right_password(page: str) -> None:
    user = make_admin("admin")
    user.set_password("right-password-1")
    user.save()
    statuses = [sign_in(page, "admin", f"guess-{k}").status_code for k in range(40)]
    assert statuses[:10] == [200] * 10  # the form again, "wrong password"
    assert statuses[10:] == [429] * 30
    refused = sign_in(page, "admin", "right-password-1", address="10.9.9.9")
    assert refused.status_code == 429
    assert b"Too many failed sign-ins" in refused.content and b"15 minutes" in refused.content
    assert "_auth_user_id" not in refused.wsgi_request.session


def test_one_address_trying_many_usernames_is_locked_too() -> None:
    statuses = [sign_in("/login/", f"user-{k}", "guess").status_code for k in range(35)]
    assert statuses[:30] == [200] * 30 and statuses[30:] == [429] * 5
    assert sign_in("/login/", "someone", "guess", address="10.0.0.2").status_code == 200


def test_a_success_clears_the_usernames_count() -> None:
    user = make_admin("admin")
    user.set_password("right-password-1")
    user.save()
    for _ in range(9):
        sign_in("/login/", "admin", "wrong")
    assert sign_in("/login/", "admin", "right-password-1").status_code == 302
    assert [sign_in("/login/", "admin", "wrong").status_code for _ in range(9)] == [200] * 9
