"""Outbox ids in commit order without holding a lock across the client's round trips.

Until now `events.publish` took a transaction-scoped advisory lock before inserting, so every
outbox writer held it from its first publish to its commit, across the round trips (and, in a
busy Python process, the waits for the GIL) between them: writers queued behind each other's
Python. Now each Event row is given its final id by a deferred constraint trigger, at COMMIT,
under the same lock: the lock is taken and released inside the database's commit (the rows'
renumbering and the WAL flush), ids still grow in commit order, and a writer's statements before
COMMIT never wait for another writer. PostgreSQL only: SQLite writers are serialized anyway.
"""

from django.db import migrations

OUTBOX_LOCK_KEY = 0x6770_7573  # "gpus", the key events.publish took itself before

CREATE = [
    f"""
CREATE FUNCTION scheduling_event_commit_order() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Held until this transaction is visible: the next writer's ids come after these.
    PERFORM pg_advisory_xact_lock({OUTBOX_LOCK_KEY});
    UPDATE scheduling_event
       SET id = nextval(pg_get_serial_sequence('scheduling_event', 'id'))
     WHERE id = NEW.id;
    RETURN NULL;
END
$$
""",
    """
CREATE CONSTRAINT TRIGGER scheduling_event_commit_order
    AFTER INSERT ON scheduling_event
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION scheduling_event_commit_order()
""",
]

DROP = [
    "DROP TRIGGER IF EXISTS scheduling_event_commit_order ON scheduling_event",
    "DROP FUNCTION IF EXISTS scheduling_event_commit_order()",
]


def _on_postgresql(statements: list[str]):  # type: ignore[no-untyped-def]
    def run(apps, schema_editor):  # type: ignore[no-untyped-def]
        if schema_editor.connection.vendor == "postgresql":
            for sql in statements:
                schema_editor.execute(sql, params=None)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0012_pod_pending_explanation"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(CREATE), _on_postgresql(DROP)),
    ]
