import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from pytest_django.fixtures import validate_django_db

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
# Every scrape of /metrics reads the database afresh (tests/security/test_metrics.py checks the
# cache the default enables).
settings.METRICS_CACHE_S = 0.0
# A cycle run in-process does its whole batch however loaded the machine is: one run_once() is
# one step of a test (tests/scheduling/worker/test_cycle_deadline.py sets deadlines of its own).
settings.SCHEDULER_CYCLE_DEADLINE_S = 3600.0
# Accounts are made and signed in by the hundred: a cheap hash (tests/support/passwords.py).
settings.PASSWORD_HASHERS = ["tests.support.passwords.FewIterationsPBKDF2PasswordHasher"]
settings.STORAGES = {
    **settings.STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
settings.MIDDLEWARE = [
    m for m in settings.MIDDLEWARE if m != "gpusched.staticfiles.StaticFilesMiddleware"
]


def _order(item: pytest.Item) -> int:
    """Where a test runs: the long ones (marked slow) first, transactional or not, so that under
    pytest-xdist the short ones fill in around them instead of a long one ending the run alone
    (with tests handed out one at a time: scripts/test.sh's --maxschedchunk 1).
    Then pytest-django's order (pytest_django/plugin.py): the transactional tests, whose teardown
    empties every table, after the other database tests. A slow transactional test may run first
    because no migration leaves rows behind (they only transform existing ones) and the flush
    recreates what post_migrate makes (content types, permissions): the tables it leaves are
    those of a fresh test database. Tests without the database may go anywhere."""
    if item.get_closest_marker("slow") is not None:
        return 0
    marker = item.get_closest_marker("django_db")
    fixtures = set(getattr(item, "fixturenames", ()))
    uses_db = marker is not None or bool(fixtures & {"db", "transactional_db", "live_server"})
    transactional = bool(fixtures & {"transactional_db", "live_server"})
    if marker is not None:
        transaction, reset_sequences, *_ = validate_django_db(marker)
        transactional = transactional or transaction or reset_sequences
    if transactional:
        return 2
    return 1 if uses_db else 3


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_order)
