"""New rows in bulk, for the writes whose volume grows with the pods a cycle places (decisions,
allocations, GPU assignments, outbox events).

`bulk_create` everywhere but on PostgreSQL, where the rows go in by COPY: Django's bulk insert there
sends each column as one array parameter, and quoting the text of every element of those arrays
on the client (JSON explanations, event payloads) cost more than the database's work on them
(docs/benchmarks.md, "The worker's commit path"). COPY needs the ids up front, so they are taken
from the table's own sequence first, in one statement; COPY checks every constraint an INSERT
does, and its errors are Django's (an IntegrityError on a UNIQUE or CHECK), so callers cannot tell
the difference.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from django.db import connection, models

M = TypeVar("M", bound=models.Model)


def insert_rows(objs: Sequence[M]) -> list[M]:
    """Insert unsaved instances of one model; they come back with their primary keys set."""
    rows = list(objs)
    if not rows:
        return rows
    model = type(rows[0])
    if connection.vendor != "postgresql":
        return model._default_manager.bulk_create(rows)
    meta = model._meta
    pk = meta.pk
    assert pk is not None
    fields = [field for field in meta.concrete_fields if field is not pk]
    quote = connection.ops.quote_name
    columns = ", ".join(quote(field.column) for field in [pk, *fields])
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT nextval(pg_get_serial_sequence(%s, %s)) FROM generate_series(1, %s)",
            [meta.db_table, pk.column, len(rows)],
        )
        # Ascending, in the callers' order: outbox readers rely on ids in publishing order.
        ids = sorted(int(row[0]) for row in cursor.fetchall())
        with (
            connection.wrap_database_errors,
            cursor.cursor.copy(f"COPY {quote(meta.db_table)} ({columns}) FROM STDIN") as copy,
        ):
            for obj, pk_value in zip(rows, ids, strict=True):
                # A related object saved after being assigned: its id, as bulk_create does.
                for field in fields:
                    if field.is_relation and getattr(obj, field.attname) is None:
                        related = getattr(obj, field.name)
                        if related is not None:
                            setattr(obj, field.attname, related.pk)
                obj.pk = pk_value
                copy.write_row(
                    [
                        pk_value,
                        *(
                            field.get_db_prep_save(field.pre_save(obj, add=True), connection)
                            for field in fields
                        ),
                    ]
                )
    for obj in rows:
        obj._state.adding = False
        obj._state.db = connection.alias
    return rows
