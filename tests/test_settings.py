import os
from pathlib import Path

import pytest
from django.db import connection, connections
from django.db.backends.sqlite3.base import DatabaseWrapper

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("DATABASE_URL")), reason="checks the default SQLite database"
)


@pytest.mark.django_db
def test_default_database_is_sqlite_in_wal_mode() -> None:
    assert connection.vendor == "sqlite"
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone() == ("wal",)
        cursor.execute("PRAGMA synchronous")
        assert cursor.fetchone() == (1,)  # NORMAL


@pytest.mark.django_db
def test_every_new_sqlite_connection_gets_the_pragmas(tmp_path: Path) -> None:
    settings_dict = {**connections.settings["default"], "NAME": str(tmp_path / "fresh.sqlite3")}
    wrapper = DatabaseWrapper(settings_dict, alias="fresh")
    try:
        with wrapper.cursor() as cursor:
            cursor.execute("PRAGMA journal_mode")
            assert cursor.fetchone() == ("wal",)
            cursor.execute("PRAGMA busy_timeout")
            assert cursor.fetchone() == (20_000,)
        assert wrapper.transaction_mode == "IMMEDIATE"  # type: ignore[attr-defined]
    finally:
        wrapper.close()
