"""A worker started on a database that `migrate` has not brought up to date ends at once with the
command to run, instead of looping on "no such table" errors."""

from __future__ import annotations

from django.core.management.base import CommandError
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor


def require_migrated(alias: str = DEFAULT_DB_ALIAS) -> None:
    connection = connections[alias]
    executor = MigrationExecutor(connection)
    unapplied = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if unapplied:
        name = connection.settings_dict["NAME"]
        raise CommandError(
            f"the database {name} lacks {len(unapplied)} migrations; run "
            "`python manage.py migrate` on it first (DATABASE_URL says which database)"
        )
