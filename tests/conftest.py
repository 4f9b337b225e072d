from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# pytest-django loads settings before this file. With debug off and GPUSCHED_SECRET_KEY unset,
# SECRET_KEY is empty and Django refuses to sign anything: give the tests a fixed key.
try:
    settings.SECRET_KEY  # noqa: B018
except ImproperlyConfigured:
    settings.SECRET_KEY = "insecure-test-only-key"
