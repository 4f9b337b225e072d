"""ASGI entry point: HTTP goes to Django (gpusched/request_handler.py), websockets to the Channels
routes of the apps."""

import os

import django

from gpusched.request_handler import RequestHandler

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpusched.settings")

# Set Django up before importing anything that may import models (as get_asgi_application does).
django.setup(set_prefix=False)
django_asgi_app = RequestHandler()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402

from dashboard.routing import websocket_urlpatterns as dashboard_routes  # noqa: E402
from dashboard.socket_auth import SessionUserMiddleware  # noqa: E402
from dashboard.socket_origin import SameOriginValidator  # noqa: E402

# The web process's extender routes (off unless GPUSCHED_WEB_EXTENDER) are built now, so that a
# bad profile fails /readyz at start instead of the first kube-scheduler call.
if settings.WEB_EXTENDER:
    from kube import extender  # noqa: E402

    extender.load()

# Debug serves the apps' static folders here; production serves the collected files from its
# middleware (gpusched/staticfiles.py).
http_app = ASGIStaticFilesHandler(django_asgi_app) if settings.DEBUG else django_asgi_app

application = ProtocolTypeRouter(
    {
        "http": http_app,
        # The Origin's host an allowed one, and the origin (scheme, host, port) the socket's own.
        "websocket": AllowedHostsOriginValidator(
            SameOriginValidator(SessionUserMiddleware(URLRouter(dashboard_routes)))
        ),
    }
)
