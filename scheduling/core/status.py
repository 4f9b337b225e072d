"""Plugin results: a code whose meaning decides what the scheduler does next, plus reasons for
humans.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Code(enum.Enum):
    SUCCESS = "Success"
    """The plugin ran and the pod may proceed."""

    ERROR = "Error"
    """Something unexpected broke (bad input, a bug). The attempt aborts; the pod is retried with
    backoff."""

    UNSCHEDULABLE = "Unschedulable"
    """The pod does not fit now, but could after something changes here: capacity freed by a pod
    finishing or by preemption. PostFilter (preemption) is tried."""

    UNSCHEDULABLE_AND_UNRESOLVABLE = "UnschedulableAndUnresolvable"
    """The pod can never fit on this node as it is (selector, taint, GPU model, topology it lacks).
    Preemption skips such nodes."""

    WAIT = "Wait"
    """Permit only: the pod is reserved but must wait (a gang not yet complete)."""

    SKIP = "Skip"
    """PreFilter/PreScore only: the plugin has nothing to do for this pod and its later phases are
    skipped."""


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @classmethod
    def success(cls, plugin: str = "") -> Status:
        return cls(Code.SUCCESS, (), plugin)

    @classmethod
    def of(cls, code: Code, *reasons: str, plugin: str = "") -> Status:
        return cls(code, tuple(reasons), plugin)

    @property
    def is_success(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_rejected(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    def message(self) -> str:
        """Reasons sorted, so the same failure always reads the same (tests and UIs compare it)."""
        return "; ".join(sorted(self.reasons))
