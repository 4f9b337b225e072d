"""PrioritySort: higher priority first, then the earlier-created pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling.core.plugin_args import ArgReader
from scheduling.core.types import PodRequest

NAME = "PrioritySort"


class PrioritySort:
    def less(self, a: PodRequest, b: PodRequest) -> bool:
        return (-a.priority, a.created_at, a.uid) < (-b.priority, b.created_at, b.uid)


def new(args: Mapping[str, Any] | None) -> PrioritySort:
    ArgReader(NAME, args).done()
    return PrioritySort()
