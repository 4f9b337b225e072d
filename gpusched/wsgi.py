"""WSGI entry point (HTTP only; websockets need the ASGI application)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "gpusched.settings")

application = get_wsgi_application()
