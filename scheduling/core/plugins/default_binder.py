"""DefaultBinder: the core has no I/O, so binding here only accepts the placement. The Django shell
and the
Kubernetes adapter register their own binder under this name (the database row, the Binding
subresource).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling.core.cycle_state import CycleState
from scheduling.core.plugin_args import ArgReader
from scheduling.core.status import Status
from scheduling.core.types import Placement, PodRequest

NAME = "DefaultBinder"


class DefaultBinder:
    def bind(self, state: CycleState, pod: PodRequest, placement: Placement) -> Status:
        return Status.success(NAME)


def new(args: Mapping[str, Any] | None) -> DefaultBinder:
    ArgReader(NAME, args).done()
    return DefaultBinder()
