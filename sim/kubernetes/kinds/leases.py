"""coordination.k8s.io/v1 Leases: acquireTime and renewTime are MicroTimes; a value the decoder
cannot parse is a 400 before any validation, as the API server's JSON decoder answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import errors
from sim.kubernetes.errors import FieldError
from sim.kubernetes.kinds.base import Rules
from sim.kubernetes.meta import MICRO_TIME

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]


class LeaseRules(Rules):
    def prepare_create(self, api: Registry, obj: Obj) -> None:
        check_times(obj)

    def validate(
        self, api: Registry, obj: Obj, old: Obj | None, subresource: str
    ) -> list[FieldError]:
        if old is not None:
            check_times(obj)
        duration = (obj.get("spec") or {}).get("leaseDurationSeconds")
        if duration is not None and (not isinstance(duration, int) or duration <= 0):
            return [errors.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0")]
        return []


def check_times(lease: Obj) -> None:
    for key in ("acquireTime", "renewTime"):
        value = (lease.get("spec") or {}).get(key)
        if value is not None and not MICRO_TIME.match(str(value)):
            raise errors.bad_request(
                f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" as '
                '"2006-01-02T15:04:05.000000Z07:00": cannot parse'
            )
