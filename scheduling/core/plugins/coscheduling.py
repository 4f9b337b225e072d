"""Coscheduling (PreFilter + Permit): a pod set with `minCount` is placed all or nothing.

Every member is reserved in the snapshot as it is scheduled; Permit answers Wait until at least
`minCount` members of the gang are held (reserved this cycle or bound before), and Success for the
member that completes the quorum. The shell binds a complete gang in one transaction, or forgets
every reserved member before the cycle ends: a gang never holds capacity across cycles, so two
gangs that each need more than half of the cluster can never deadlock - one completes first, the
other waits for it to finish.

PreFilter counts the members the snapshot already holds (it has the snapshot; Permit does not);
Permit adds the pod itself, which is reserved by then.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scheduling.core.cycle_state import CycleState
from scheduling.core.plugin_args import ArgReader
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.status import Code, Status
from scheduling.core.types import Placement, PodRequest

NAME = "Coscheduling"
WAITING_FOR_GANG = "WaitingForGang"
_STATE_KEY = "PreFilter" + NAME


class Coscheduling:
    def pre_filter(self, state: CycleState, pod: PodRequest, snapshot: ClusterSnapshot) -> Status:
        if pod.gang is not None:
            others = snapshot.pods.gang_size(pod.gang.name) - (1 if pod.uid in snapshot.pods else 0)
            state.write(_STATE_KEY, others)
        return Status.success(NAME)

    def permit(self, state: CycleState, pod: PodRequest, placement: Placement) -> Status:
        if pod.gang is None:
            return Status.success(NAME)
        held = (state.get(_STATE_KEY, int) or 0) + 1
        if held >= pod.gang.min_count:
            return Status.success(NAME)
        return Status.of(
            Code.WAIT,
            f"{WAITING_FOR_GANG}: {held} of {pod.gang.min_count} members of gang "
            f"{pod.gang.shown()} placed",
            plugin=NAME,
        )


def new(args: Mapping[str, Any] | None) -> Coscheduling:
    ArgReader(NAME, args).done()
    return Coscheduling()
