"""The per-kind hooks of the registry; kinds without any get this base (metadata checks only),
as a CRD without a schema would."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.kubernetes.errors import FieldError

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]


class Rules:
    dns_label_names = False  # namespaces: names are RFC 1123 labels
    default_propagation = "Background"  # a delete that names no propagationPolicy

    def prepare_create(self, api: Registry, obj: Obj) -> None:
        """Defaults and admission on a new object (may raise ApiError)."""

    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        return []

    def grace_period_s(self, obj: Obj, requested: int | None) -> int:
        """Seconds between the delete and the object's removal (0: at once)."""
        return 0


@dataclass(frozen=True)
class View:
    """How a resource served in another shape than it is stored converts: `out` a stored object
    to the served shape, `into` a served body to the stored shape."""

    out: Callable[[Obj], Obj]
    into: Callable[[Obj], Obj]
