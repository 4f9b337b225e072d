"""The audit trail of admins' actions: one outbox event per action, in the transaction of the
change it records (the caller's)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling import events


def admin_action_record(
    *, actor: str, action: str, target: str, detail: Mapping[str, Any] | None = None
) -> None:
    """Record that `actor` did `action` to `target`. Called inside the action's transaction, so
    the record and the change commit (or not) together."""
    events.publish(
        events.AdminActed(actor=actor, action=action, target=target, detail=dict(detail or {}))
    )
