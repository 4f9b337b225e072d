"""The database checks: PostgreSQL without autovacuum is reported, with the fix."""

import pytest
from django.core.checks import run_checks
from django.db import connection

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_postgres_without_autovacuum_is_reported_and_sqlite_is_not_judged() -> None:
    found = [m for m in run_checks(databases=["default"]) if m.id == "gpusched.W001"]
    if connection.vendor != "postgresql":
        assert found == []
        return
    with connection.cursor() as cursor:
        cursor.execute("SHOW autovacuum")
        (value,) = cursor.fetchone()
    assert (value == "on") == (found == [])
    if found:
        assert "autovacuum" in found[0].msg and "autovacuum = on" in str(found[0].hint)
