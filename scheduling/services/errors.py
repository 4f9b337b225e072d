"""Errors services raise for requests the state does not allow."""

from __future__ import annotations

from collections.abc import Mapping


class ServiceError(Exception):
    """A request the state does not allow; the message says why (shown to API clients)."""


class FieldErrors(ServiceError):
    """A request naming what the state does not have: `fields` maps each offending field of the
    request to its messages (the API answers them as its field errors)."""

    def __init__(self, fields: Mapping[str, list[str]]) -> None:
        self.fields = {name: list(messages) for name, messages in fields.items()}
        super().__init__(
            "; ".join(f"{name}: {' '.join(messages)}" for name, messages in self.fields.items())
        )
