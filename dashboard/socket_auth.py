"""Who is on a dashboard socket: the signed-in user of the session cookie, resolved once when the
socket connects (by channels.auth.get_user, as channels' AuthMiddlewareStack resolves it,
the session's auth hash checked).

Not AuthMiddlewareStack itself: its session middleware wraps the socket's send to save a session
changed while the socket is open, and so checks the session on every message sent. These sockets
never change a session, and that check was a quarter of the CPU of fanning a delta out to a
process's sockets (docs/benchmarks.md). Signing out still closes the sockets, through the user's
group (dashboard/consumers.py).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from channels.auth import get_user
from django.conf import settings
from django.http.cookie import parse_cookie

Scope = dict[str, Any]


class SessionUserMiddleware:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        header = b"; ".join(value for name, value in scope.get("headers", []) if name == b"cookie")
        cookies = parse_cookie(header.decode("latin-1"))
        store = import_module(settings.SESSION_ENGINE).SessionStore
        session = store(cookies.get(settings.SESSION_COOKIE_NAME))
        user = await get_user({"session": session})
        return await self.inner({**scope, "session": session, "user": user}, receive, send)
