"""System checks on the database the scheduler runs on (`manage.py check --database default`;
`migrate` runs them too, so the migrations Job reports them)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.core.checks import CheckMessage, Tags, register
from django.core.checks import Warning as CheckWarning
from django.db import connections


@register(Tags.database)
def postgres_autovacuum(
    app_configs: Sequence[Any] | None, databases: Iterable[str] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Every scheduling cycle rewrites the waiting pods' attempts and backoff: without
    autovacuum, PostgreSQL keeps every old row version and never gathers statistics, and the
    pending-pod reads grow from milliseconds to seconds within hours."""
    found: list[CheckMessage] = []
    for alias in databases or ():
        connection = connections[alias]
        if connection.vendor != "postgresql":
            continue
        with connection.cursor() as cursor:
            cursor.execute("SHOW autovacuum")
            (value,) = cursor.fetchone()
        if value != "on":
            found.append(
                CheckWarning(
                    f"PostgreSQL autovacuum is {value} on database {alias!r}",
                    hint="turn it on (autovacuum = on): the scheduler's tables are rewritten "
                    "every cycle and slow down without it",
                    id="gpusched.W001",
                )
            )
    return found
