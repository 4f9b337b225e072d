"""Which pages may open a dashboard socket: this site's own, scheme, host and port.

channels' AllowedHostsOriginValidator (kept in front, gpusched/asgi.py) compares only the Origin's
host with ALLOWED_HOSTS, so a page served by anything else on an allowed host (another port, or
plain http beside the https site) could open a socket with the admin's cookie. Here the Origin
must be the socket's own origin, judged as Django's CSRF check judges a form's Origin
(CsrfViewMiddleware: the request's scheme, https when it is secure, and its Host header), or be
one of CSRF_TRUSTED_ORIGINS. Secure: a `wss` socket, or the trusted proxy's header
(SECURE_PROXY_SSL_HEADER) saying https.
"""

from __future__ import annotations

from typing import Any

from channels.security.websocket import WebsocketDenier
from django.conf import settings

Scope = dict[str, Any]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _is_secure(scope: Scope) -> bool:
    if scope.get("scheme") == "wss":
        return True
    proxy_header = getattr(settings, "SECURE_PROXY_SSL_HEADER", None)
    if not proxy_header:
        return False
    meta_name, secure_value = proxy_header
    # Django's META name (HTTP_X_FORWARDED_PROTO) as the header it came from.
    name = meta_name.removeprefix("HTTP_").lower().replace("_", "-").encode("latin-1")
    value = _header(scope, name)
    return value is not None and value.split(",")[0].strip() == secure_value


def same_origin(scope: Scope) -> bool:
    origin = _header(scope, b"origin")
    host = _header(scope, b"host")
    if not origin or not host:
        return False
    origin = origin.lower()
    own = f"{'https' if _is_secure(scope) else 'http'}://{host.lower()}"
    return origin == own or origin in {o.lower() for o in settings.CSRF_TRUSTED_ORIGINS}


class SameOriginValidator:
    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> Any:
        if scope["type"] == "websocket" and not same_origin(scope):
            return await WebsocketDenier()(scope, receive, send)
        return await self.inner(scope, receive, send)
