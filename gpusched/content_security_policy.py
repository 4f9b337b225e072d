"""The Content-Security-Policy header on every response of the web process.

Scripts only from this site (no inline script, no eval, nothing from another host): an injected
`<script>` or `onerror=` in a page does not run. Styles from this site, inline styles allowed: the
dashboard's meters and legends set their widths and colours in `style` attributes
(dashboard/static/dashboard/cluster.js), and an inline style cannot run code. Sockets and fetches
to this site only; no plugins; no page may frame this one (as X-Frame-Options: DENY says) or
change its base URL; forms post to this site only. The API docs page loads Swagger UI's script
from a URL of its own (drf-spectacular's SpectacularSwaggerSplitView) so it needs no inline script.
A view that sets its own policy keeps it. The policy is CONTENT_SECURITY_POLICY
(gpusched/settings.py; GPUSCHED_CONTENT_SECURITY_POLICY replaces it).
"""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponseBase


def content_security_policy(
    get_response: Callable[[HttpRequest], HttpResponseBase],
) -> Callable[[HttpRequest], HttpResponseBase]:
    def middleware(request: HttpRequest) -> HttpResponseBase:
        response = get_response(request)
        response.headers.setdefault("Content-Security-Policy", settings.CONTENT_SECURITY_POLICY)
        return response

    return middleware
