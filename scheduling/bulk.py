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

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, connection, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

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
    # The thread's connection itself: each use of the `connection` proxy looks it up again.
    values = [_column_value(field, connections[DEFAULT_DB_ALIAS]) for field in fields]
    relations = [field for field in fields if field.is_relation]
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
                for field in relations:
                    if getattr(obj, field.attname) is None:
                        related = getattr(obj, field.name)
                        if related is not None:
                            setattr(obj, field.attname, related.pk)
                obj.pk = pk_value
                copy.write_row([pk_value, *(value(obj) for value in values)])
    for obj in rows:
        obj._state.adding = False
        obj._state.db = connection.alias
    return rows


def update_rows(objs: Sequence[models.Model], names: Sequence[str]) -> int:
    """Write the named fields of saved instances of one model, as bulk_update does, in one
    `UPDATE ... FROM (VALUES ...)` per chunk of rows: bulk_update's CASE with a branch per row
    costs the database a scan of the branches for each row and Django a compiled expression per
    branch. Values go as parameters, converted by their fields; on PostgreSQL each is cast to its
    column's type (a VALUES list of parameters is text otherwise), on SQLite none is (a CAST there
    would turn a date into a number). Returns how many rows were updated."""
    rows = list(objs)
    if not rows or not names:
        return 0
    meta = type(rows[0])._meta
    fields: list[Any] = [meta.get_field(name) for name in names]
    if not all(isinstance(field, models.Field) and field.concrete for field in fields):
        raise ValueError(f"not columns of {meta.label}: {names}")
    pk = meta.pk
    assert pk is not None
    quote = connection.ops.quote_name
    casts = connection.vendor == "postgresql"
    placeholders = ", ".join(
        f"CAST(%s AS {field.db_type(connection)})" if casts else "%s" for field in [pk, *fields]
    )
    columns = ", ".join(
        f"column{k} AS c{k}" for k in range(1, len(fields) + 2)
    )  # c1 is the key; the VALUES list's own column names are column1, column2, ... on both
    assignments = ", ".join(
        f"{quote(field.column)} = d.c{k}" for k, field in enumerate(fields, start=2)
    )
    size = max(1, min(1000, connection.ops.bulk_batch_size([pk, *fields], rows)))
    updated = 0
    with connection.cursor() as cursor:
        for start in range(0, len(rows), size):
            chunk = rows[start : start + size]
            params: list[Any] = []
            for obj in chunk:
                params.append(pk.get_db_prep_value(obj.pk, connection))
                params.extend(
                    field.get_db_prep_save(getattr(obj, field.attname), connection)
                    for field in fields
                )
            values = ", ".join(f"({placeholders})" for _ in chunk)
            cursor.execute(
                f"UPDATE {quote(meta.db_table)} AS t SET {assignments} FROM "
                f"(SELECT {columns} FROM (VALUES {values}) AS v) AS d "
                f"WHERE t.{quote(pk.column)} = d.c1",
                params,
            )
            updated += cursor.rowcount
    return updated


# Field classes whose database value is the attribute itself when it has the type named: what
# get_db_prep_save returns for it unchanged. Converting every column of every row the generic way
# was most of the Python time of a batch's inserts; any other type, or field, still goes that way.
_PLAIN: dict[type[models.Field[Any, Any]], type] = {
    models.CharField: str,
    models.TextField: str,
    models.BooleanField: bool,
    models.IntegerField: int,
    models.BigIntegerField: int,
    models.SmallIntegerField: int,
    models.PositiveIntegerField: int,
    models.PositiveBigIntegerField: int,
    models.PositiveSmallIntegerField: int,
}


def _column_value(
    field: models.Field[Any, Any], db: BaseDatabaseWrapper
) -> Callable[[models.Model], Any]:
    """What goes into the field's column for an unsaved instance (as an INSERT would write), on
    PostgreSQL (COPY's path). The common cases take a shortcut that gives the same value as
    `pre_save` and `get_db_prep_save` (which cost more than the COPY itself for a burst of
    thousands of pods): a plain value as it is, an aware datetime as it is (the backend adapts
    none), a creation or update time set to now, a UUID as it is (PostgreSQL has the type), a
    dict or list of a JSONField without its own encoder as its JSON text (what the field's
    adapter would send)."""
    target = field.target_field if isinstance(field, models.ForeignKey) else field
    plain = _PLAIN.get(type(target))
    if isinstance(target, models.AutoField | models.BigAutoField):
        plain = int
    attname = field.attname

    def generic(obj: models.Model) -> Any:
        return field.get_db_prep_save(field.pre_save(obj, add=True), db)

    if isinstance(field, models.DateTimeField) and (field.auto_now or field.auto_now_add):

        def stamped(obj: models.Model) -> Any:
            value = timezone.now()
            setattr(obj, attname, value)
            return value

        return stamped
    if isinstance(field, models.DateTimeField):

        def moment(obj: models.Model) -> Any:
            raw = getattr(obj, attname)
            aware = type(raw) is datetime and raw.tzinfo is not None
            return raw if raw is None or aware else generic(obj)

        return moment
    if isinstance(field, models.UUIDField) and db.features.has_native_uuid_field:
        plain = uuid.UUID
    if isinstance(field, models.JSONField) and field.encoder is None:

        def document(obj: models.Model) -> Any:
            raw = getattr(obj, attname)
            return json.dumps(raw) if type(raw) in (dict, list) else generic(obj)

        return document
    if plain is None:
        return generic

    def value(obj: models.Model) -> Any:
        raw = getattr(obj, attname)
        return raw if raw is None or type(raw) is plain else generic(obj)

    return value
