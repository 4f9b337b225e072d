"""Real web processes for the dashboard tests (bench/web_process.py), and a node changed as an
admin would from a test's helper thread."""

from __future__ import annotations

from django.db import connection

from bench.web_process import ROOT, database_url, free_port, web_server

__all__ = ["ROOT", "database_url", "free_port", "set_cordoned", "web_server"]


def set_cordoned(name: str, cordoned: bool = True) -> int:
    """Change a node as an admin would (through the service, with its outbox event) from a test's
    helper thread; the id of the event."""
    from dashboard.selectors import head_event_id
    from scheduling import services
    from scheduling.models import Node

    try:
        services.node_set_cordoned(node=Node.objects.get(name=name), cordoned=cordoned)
        return head_event_id()
    finally:
        connection.close()  # this thread's connection: the test database is dropped later
