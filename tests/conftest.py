from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# pytest-django loads settings before this file. With debug off and GPUSCHED_SECRET_KEY unset,
# SECRET_KEY is empty and Django refuses to sign anything: give the tests a fixed key.
try:
    settings.SECRET_KEY  # noqa: B018
except ImproperlyConfigured:
    settings.SECRET_KEY = "insecure-test-only-key"

# The tests drive the production settings in-process, over plain HTTP and with no collected static
# files: no redirect to HTTPS, plain static names, no static files middleware (it would warn about
# the missing STATIC_ROOT). tests/security/ checks those production parts in real processes.
settings.SECURE_SSL_REDIRECT = False
# Every read of the queue status computes the usage ratios afresh
# (tests/scheduling/selectors/test_efficiency.py checks the cache the default enables).
settings.USAGE_RATIOS_MAX_AGE_S = 0.0
settings.STORAGES = {
    **settings.STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
settings.MIDDLEWARE = [
    m for m in settings.MIDDLEWARE if m != "gpusched.staticfiles.StaticFilesMiddleware"
]
