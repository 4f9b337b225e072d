"""Dashboard accounts and their session cookies, for tests that talk to the pages or sockets."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.test import Client


def make_admin(username: str = "admin", *, staff: bool = True) -> User:
    users = get_user_model()
    user = users.objects.filter(username=username).first()
    if user is None:
        user = users.objects.create_user(username=username, password="pw-not-used")
    user.is_staff = user.is_superuser = staff
    user.save()
    return user


def session_cookie(user: Any) -> bytes:
    client = Client()
    client.force_login(user)
    name = settings.SESSION_COOKIE_NAME
    return f"{name}={client.cookies[name].value}".encode()
