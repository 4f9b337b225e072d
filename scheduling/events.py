"""Typed events of the outbox. Only services publish, always inside the transaction that made the
change, so a reader tailing Event rows by id sees exactly the committed changes, in commit order.

Each payload is a frozen dataclass whose `TYPE` names it; the row stores `{"type": TYPE,
...fields}`. Readers get payload objects back (`read`, `read_after`), never raw dicts: every reader
declares which types it handles and which it ignores (tests/scheduling/test_events.py holds each
reader to the whole registry), and a row of a type this version does not know (written by a newer
replica during an upgrade) reads as `UnknownEvent`, which readers treat as "anything may have
changed"."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Self

from django.db import connection

from scheduling.bulk import insert_rows
from scheduling.models import Event, Pod

# PostgreSQL hands out ids before commit, so two concurrent writers could commit ids out of order.
# A deferred trigger (migration 0013) gives each row its final id at COMMIT, under one
# transaction-scoped advisory lock, so ids grow in commit order while the lock is held only inside
# the database's commit, never across a writer's round trips (SQLite writers are serialized anyway).


_NAMES: dict[type[EventPayload], tuple[str, ...]] = {}


def _names(cls: type[EventPayload]) -> tuple[str, ...]:
    if cls not in _NAMES:
        _NAMES[cls] = tuple(f.name for f in fields(cls))
    return _NAMES[cls]


@dataclass(frozen=True)
class EventPayload:
    TYPE: ClassVar[str] = ""

    def as_json(self) -> dict[str, Any]:
        # Fields hold JSON values (no nested dataclasses): a shallow copy, not asdict's deep one,
        # which cost as much as the row's insert on the commit path.
        return {"type": self.TYPE, **{name: getattr(self, name) for name in _names(type(self))}}


@dataclass(frozen=True)
class NodeChanged(EventPayload):
    TYPE: ClassVar[str] = "node.changed"
    node: str
    cordoned: bool
    gpus: int
    labels: dict[str, str] = field(default_factory=dict)
    # Only `cordoned` changed (a reader may apply it in place); False: anything about the node
    # may have (capacity, GPUs, labels, taints), and so for rows written before this field.
    cordon_only: bool = False


@dataclass(frozen=True)
class NodeQuarantined(EventPayload):
    """The scheduler stopped trusting a node's recorded state (nothing is placed there), or
    trusts it again (`reason` empty)."""

    TYPE: ClassVar[str] = "node.quarantined"
    node: str
    reason: str = ""


@dataclass(frozen=True)
class WorkloadChanged(EventPayload):
    TYPE: ClassVar[str] = "workload.changed"
    uid: str
    tenant: str
    name: str
    queue: str
    state: str
    reason: str = ""
    cluster_queue: str = ""
    pending_reason: str = ""  # WaitingForQuota, NoFit, TopologyPlacementFailed, WaitingForGang, ...


@dataclass(frozen=True)
class WorkloadEvicted(EventPayload):
    """An admitted workload lost its quota and its pods (preempted); it is back in its queue."""

    TYPE: ClassVar[str] = "workload.evicted"
    uid: str
    tenant: str
    name: str
    queue: str
    cluster_queue: str
    reason: str
    preemptor: str = ""  # uid of the workload it made room for
    pods: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ReservationReleased(EventPayload):
    """A waiting gang or large pod gave up the nodes held for it: they could not hold all it
    needs within the reservation horizon (scheduling.core.queueing.backfill)."""

    TYPE: ClassVar[str] = "workload.reservation_released"
    uid: str
    tenant: str
    name: str
    nodes: list[str]
    reason: str


@dataclass(frozen=True)
class QueuesChanged(EventPayload):
    """Queue configuration was applied (names of what was created or updated, and of what a
    mirror of the cluster's objects removed: "ClusterQueue a", "LocalQueue ns/b", ...)."""

    TYPE: ClassVar[str] = "queues.changed"
    flavors: list[str] = field(default_factory=list)
    cluster_queues: list[str] = field(default_factory=list)
    local_queues: list[str] = field(default_factory=list)
    priority_classes: list[str] = field(default_factory=list)
    cohorts: list[str] = field(default_factory=list)
    topologies: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class QueueSourceChanged(EventPayload):
    """Where the queues come from changed (models.QueueSource), or why the cluster's Kueue
    objects are refused (`error`, "" when they are not)."""

    TYPE: ClassVar[str] = "queues.source"
    kind: str
    error: str = ""


@dataclass(frozen=True)
class LocalQueueUsageSampled(EventPayload):
    """Admission fair sharing sampled these LocalQueues' decayed usage ("namespace/name")."""

    TYPE: ClassVar[str] = "queues.usage"
    local_queues: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PodEvent(EventPayload):
    """An event about one pod, which says whose pod it is."""

    uid: str
    name: str
    tenant: str
    workload: str

    @classmethod
    def of(cls, pod: Pod, **fields: Any) -> Self:
        """For a pod loaded with its workload and tenant (select_related)."""
        return cls(
            uid=str(pod.uid),
            name=pod.name,
            tenant=pod.workload.tenant.name,
            workload=pod.workload.name,
            **fields,
        )


@dataclass(frozen=True)
class PodBound(PodEvent):
    TYPE: ClassVar[str] = "pod.bound"
    node: str
    gpus: list[int]
    milli_per_gpu: int
    mig_slots: list[list[int]]
    scope: str
    decision: int | None = None  # PlacementDecision id, for "why this node"
    reclaimed: bool = False  # on capacity lent by the GPU's owners (reclaim)


@dataclass(frozen=True)
class PodUnschedulable(PodEvent):
    TYPE: ClassVar[str] = "pod.unschedulable"
    reason: str
    attempts: int


@dataclass(frozen=True)
class PodPhaseChanged(PodEvent):
    TYPE: ClassVar[str] = "pod.phase"
    phase: str
    node: str = ""


@dataclass(frozen=True)
class AllocationReleased(EventPayload):
    TYPE: ClassVar[str] = "allocation.released"
    pod_uid: str
    node: str
    gpus: list[int]
    reason: str


@dataclass(frozen=True)
class AllocationPromoted(EventPayload):
    """A lent share whose lenders left now stands on the GPU's free capacity: it is no longer
    lent, and reclaim will not evict it."""

    TYPE: ClassVar[str] = "allocation.promoted"
    pod_uid: str
    node: str
    gpu: int


@dataclass(frozen=True)
class GpusObserved(EventPayload):
    """A pod really holds other GPUs than were recorded (what the node gave it: DCGM's pod
    labels, or its DRA claims): its allocation now names the observed ones."""

    TYPE: ClassVar[str] = "allocation.gpus_observed"
    pod_uid: str
    node: str
    recorded: list[int]
    observed: list[int]
    source: str


@dataclass(frozen=True)
class AdminActed(EventPayload):
    """An admin acted (from the dashboard: cordon, drain, cancel; from the dashboard or the REST
    API: a ClusterQueue's quota changed): who, what, on what. The change itself has its own
    events; this one is the audit trail."""

    TYPE: ClassVar[str] = "admin.acted"
    actor: str
    action: str
    target: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class UnknownEvent(EventPayload):
    """A row this version cannot read (a newer type, or a payload missing required fields)."""

    TYPE: ClassVar[str] = ""
    type: str
    payload: dict[str, Any] = field(default_factory=dict)


EVENT_TYPES: dict[str, type[EventPayload]] = {
    cls.TYPE: cls
    for cls in (
        NodeChanged,
        NodeQuarantined,
        WorkloadChanged,
        WorkloadEvicted,
        ReservationReleased,
        QueuesChanged,
        QueueSourceChanged,
        LocalQueueUsageSampled,
        PodBound,
        PodUnschedulable,
        PodPhaseChanged,
        AllocationReleased,
        AllocationPromoted,
        GpusObserved,
        AdminActed,
    )
}
EventTypes = frozenset[type[EventPayload]]


def read(kind: str, payload: Mapping[str, Any]) -> EventPayload:
    """The payload object of one outbox row."""
    cls = EVENT_TYPES.get(kind)
    if cls is None:
        return UnknownEvent(kind, dict(payload))
    known = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in payload.items() if k in known})
    except TypeError:
        return UnknownEvent(kind, dict(payload))


def read_after(cursor: int, limit: int | None = None) -> list[tuple[int, EventPayload]]:
    """(id, payload) of the rows after `cursor`, in commit order."""
    rows = Event.objects.filter(id__gt=cursor).order_by("id").values_list("id", "type", "payload")
    return read_rows(rows[:limit] if limit is not None else rows)


def event_type(event: EventPayload) -> str:
    """The type name a row was written with (an unknown event keeps its own)."""
    return event.type if isinstance(event, UnknownEvent) else event.TYPE


def read_rows(rows: Iterable[tuple[int, str, Mapping[str, Any]]]) -> list[tuple[int, EventPayload]]:
    return [(event_id, read(kind, payload)) for event_id, kind, payload in rows]


def publish(*payloads: EventPayload) -> None:
    """Write outbox rows in the caller's transaction (services only). On PostgreSQL their ids are
    final only once it commits (migration 0013), so none are returned."""
    if not payloads:
        return
    if not connection.in_atomic_block:
        raise RuntimeError(
            "events are published inside the transaction of the change they describe"
        )
    insert_rows([Event(type=p.TYPE, payload=p.as_json()) for p in payloads])
