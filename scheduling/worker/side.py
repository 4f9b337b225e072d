"""What differs between the two worlds gpusched schedules (DESIGN.md §8): a small protocol the one
scheduling cycle (scheduling.worker.cycle) is written against.

- the database side (scheduling.worker.database_side): the simulator and the tenants' REST API write
  nodes, workloads and pods into the database; a placement is real once committed, an evicted
  pod is gone at once;
- the Kubernetes side (kube.side): informers mirror the cluster into the database; a placement is
  real once the Binding is written; an evicted pod terminates for its grace period and counts as
  holding what it holds until it is gone.

Leadership is its own one-method protocol (`Elector`), since a side can be led by either kind of
lease.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from scheduling.core.scheduler import Decision
from scheduling.models import Pod


@dataclass(frozen=True)
class Leadership:
    leading: bool
    new_term: bool = False  # just became leader: trust nothing cached, reconcile


class Elector(Protocol):
    def lead(self, now: datetime) -> Leadership: ...

    def stand_down(self) -> None: ...


@dataclass(frozen=True)
class SideSync:
    """What syncing the side brought in."""

    ready: bool = (
        True  # False: the side's view is partial (informers still listing): decide nothing
    )
    protected: frozenset[str] = frozenset()  # pod uids a disruption budget protects right now
    counts: Mapping[str, int] = field(default_factory=dict)  # what changed, for the cycle report


class Verdict(enum.Enum):
    GONE = "gone"  # the pod no longer holds anything
    TERMINATING = "terminating"  # accepted; it holds what it holds until it is gone
    REFUSED = "refused"  # not evictable now (a disruption budget); it keeps running


@dataclass(frozen=True)
class NodeAnswer:
    """What the cluster said to a cordon or uncordon."""

    status: int  # HTTP status of the change (200: done)
    unschedulable: bool | None  # the node's cordon as read back after it (None: not known)
    message: str = ""


@dataclass(frozen=True)
class PodEviction:
    pod: Pod  # loaded with its workload and tenant
    reason: str
    preemptor: Pod | None = None


@dataclass(frozen=True)
class BindRefused:
    """A committed placement the cluster would not make real (it goes back to the queue)."""

    pod: Pod
    reason: str
    conflict: bool = False  # someone else placed the pod meanwhile (Kubernetes: 409)


class Binding(Protocol):
    """Committed placements a side is making real."""

    def done(self) -> bool:
        """Whether the cluster answered for each (`wait` returns at once)."""
        ...

    def wait(self) -> list[BindRefused]:
        """Once the cluster answered for each: the ones it refused."""
        ...


@dataclass(frozen=True)
class Answered:
    """A binding the side answered at once."""

    refused: list[BindRefused] = field(default_factory=list)

    def done(self) -> bool:
        return True

    def wait(self) -> list[BindRefused]:
        return self.refused


@dataclass(frozen=True)
class Waiting:
    """A pod that did not get a node this cycle, and what to tell its owner."""

    pod: Pod
    message: str
    nominated_node: str = ""  # the node a preemption is emptying for it


class ClusterSide(Protocol):
    name: str
    # Whether an evicted pod is gone at once (its capacity free within the same batch) or
    # terminates first.
    evictions_free_at_once: bool
    # Whether `report` tells pods anything (Kubernetes: events and conditions); the database
    # side's reasons are its records, so pods of waiting workloads are not even read for it.
    tells_pods: bool

    @property
    def queues_admit(self) -> bool:
        """Whether gpusched's queues admit this side's workloads. False: the cluster's own
        admission controller (Kueue) admitted every pod before the side sees it, so workloads are
        admitted as they come and no queue is read or acted on (kube.kueue)."""
        ...

    def sync(self, now: datetime) -> SideSync:
        """Bring what changed outside gpusched into the database."""
        ...

    def placeable(self, pods: Sequence[Pod]) -> list[Pod]:
        """The pending pods this side can place now (on Kubernetes: pods that exist, are ours,
        ungated and not being deleted)."""
        ...

    def evict(
        self,
        evictions: Sequence[PodEviction],
        now: datetime,
        said: dict[str, str] | None = None,
    ) -> dict[str, Verdict]:
        """Ask for the pods to go; a verdict per pod uid (and in `said`, when given, what the
        cluster answered for each, e.g. "429 TooManyRequests: ...")."""
        ...

    def cordon(self, node: str, cordoned: bool) -> NodeAnswer:
        """Cordon or uncordon the node in the cluster, and read it back."""
        ...

    def bind(self, placed: Sequence[tuple[Pod, Decision]], now: datetime) -> Binding:
        """Start making committed placements real (Kubernetes: Bindings in flight while the
        cycle goes on, the placements assumed in its snapshot); the cycle waits for the answers
        before it ends."""
        ...

    def report(self, waiting: Sequence[Waiting], now: datetime) -> int:
        """Tell the cluster why pods wait; returns how many reports went out."""
        ...
