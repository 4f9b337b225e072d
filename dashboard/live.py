"""Live views: the state each dashboard page keeps in the browser, and how outbox events turn into
deltas of it. No I/O of its own besides the selectors; the tailer runs these in its DB thread.

A view's state is `{slice: {key: doc}}`. Changes to it are `{slice: {"set": {key: doc}, "del":
[key], "replace": {key: doc}}}` (each part optional), applied by `apply()` here and by the same
few lines in static/dashboard/live.js. Two kinds of slices:

- outbox slices change only through committed outbox events: `changes()` maps a batch of events to
  the keys they touch and re-reads just those (a node, the decision window, ...). The invariant,
  tested: snapshot + every delta == a fresh snapshot.
- sampled slices (telemetry, usage series) are not in the outbox; `sample()` re-reads them every
  few seconds and the tailer sends the difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, ClassVar

from dashboard.selectors import Doc
from dashboard.selectors import cluster as cluster_docs
from dashboard.selectors import node as node_docs
from dashboard.selectors import placements as placement_docs
from dashboard.selectors import queues as queue_docs
from dashboard.selectors import tenants as tenant_docs
from scheduling.events import (
    EVENT_TYPES,
    AllocationPromoted,
    AllocationReleased,
    EventPayload,
    EventTypes,
    LocalQueueUsageSampled,
    NodeChanged,
    NodeQuarantined,
    PodBound,
    PodPhaseChanged,
    PodUnschedulable,
    QueuesChanged,
    QueueSourceChanged,
    UnknownEvent,
    WorkloadChanged,
    WorkloadEvicted,
)
from scheduling.worker.cache import ClusterCache

State = dict[str, dict[str, Doc]]
Changes = dict[str, dict[str, Any]]
EventRow = tuple[int, EventPayload]
ALL_EVENTS: EventTypes = frozenset(EVENT_TYPES.values())

# What each kind of view is moved by (the rest of the outbox it ignores).
NODE_EVENTS: EventTypes = frozenset(
    {NodeChanged, NodeQuarantined, PodBound, AllocationReleased, AllocationPromoted}
)
DECISION_EVENTS: EventTypes = frozenset({PodBound, PodUnschedulable})
QUEUE_EVENTS: EventTypes = frozenset(
    {
        QueuesChanged,
        LocalQueueUsageSampled,
        WorkloadChanged,
        WorkloadEvicted,
        PodBound,
        PodUnschedulable,
        PodPhaseChanged,
        AllocationReleased,
    }
)


def apply(state: State, changes: Changes) -> State:
    """Apply changes in place (the reference for live.js `applyChanges`)."""
    for name, change in changes.items():
        if "replace" in change:
            state[name] = dict(change["replace"])
        part = state.setdefault(name, {})
        for key in change.get("del", ()):
            part.pop(key, None)
        part.update(change.get("set", {}))
    return state


def diff(
    old: dict[str, Doc], new: dict[str, Doc], keys: Iterable[str] | None = None
) -> dict[str, Any]:
    """What turns `old` into `new`, looking only at `keys` when given (the rest is unchanged)."""
    candidates = set(old) | set(new) if keys is None else set(keys)
    changed = {
        key: new[key] for key in sorted(candidates) if key in new and old.get(key) != new[key]
    }
    gone = sorted(key for key in candidates if key in old and key not in new)
    result: dict[str, Any] = {}
    if changed:
        result["set"] = changed
    if gone:
        result["del"] = gone
    return result


class LiveView:
    """One page's live state. Subclasses set `name` and implement `build()` / `changes()`; views
    with telemetry parts implement `sample()` too."""

    name: ClassVar[str]
    sample_every: ClassVar[float | None] = None  # seconds; None: nothing sampled
    HANDLES: ClassVar[EventTypes]  # the outbox types that can change what the view shows
    # A type this version cannot read may have changed anything: views whose state it could touch
    # re-read; a view of immutable records (decisions) does not.
    REREADS_ON_UNKNOWN: ClassVar[bool] = True

    @classmethod
    def ignores(cls) -> EventTypes:
        return ALL_EVENTS - cls.HANDLES

    def concerned(self, events: Sequence[EventRow]) -> bool:
        return any(
            type(event) in self.HANDLES
            or (self.REREADS_ON_UNKNOWN and isinstance(event, UnknownEvent))
            for _, event in events
        )

    def __init__(self, param: str = "") -> None:
        self.param = param

    @property
    def key(self) -> str:
        return f"{self.name}:{self.param}" if self.param else self.name

    def build(self) -> State:
        raise NotImplementedError

    def changes(self, state: State, events: Sequence[EventRow]) -> Changes | None:
        """What `events` change in `state`: {} when they concern this view but nothing shown
        changed (still pushed, so the client's last id moves on), None when they do not concern
        it at all."""
        raise NotImplementedError

    def sample(self) -> State:
        return {}


def _put(changes: Changes, name: str, change: dict[str, Any]) -> None:
    if change:
        changes[name] = change


class ClusterView(LiveView):
    """Cluster page: every node with its topology and GPU holders, the totals and the topology's
    domains with their free GPUs (from the outbox: a Topology comes with the queues); the
    stranded count and per-node telemetry (sampled)."""

    name = "cluster"
    sample_every = 5.0
    HANDLES = NODE_EVENTS | {QueuesChanged}

    def __init__(self, param: str = "") -> None:
        super().__init__(param)
        # The scheduler's snapshot, kept current from the outbox as the scheduler keeps its own:
        # what the stranded count is judged on. Sampled rather than pushed with every delta: it
        # depends on the whole queue, and its first read (the whole snapshot) would otherwise
        # hold up a first visitor's page.
        self.cluster = ClusterCache()

    def build(self) -> State:
        levels = cluster_docs.topology_levels()
        docs = cluster_docs.cluster_nodes(levels=levels)
        return {
            "nodes": docs.nodes,
            "topologies": docs.topologies,
            "summary": {"all": cluster_docs.cluster_summary(docs.nodes)},
            "levels": {"all": cluster_docs.levels_doc(levels)},
            "domains": cluster_docs.domain_free_gpus(docs.nodes),
        }

    def changes(self, state: State, events: Sequence[EventRow]) -> Changes | None:
        if not self.concerned(events):
            return None
        changes: Changes = {}
        nodes, topologies = state["nodes"], state["topologies"]
        levels = cluster_docs.topology_levels()
        touched = _nodes_of(events)
        if state["levels"]["all"]["labels"] != levels:  # every node's domain moves: all re-read
            _put(changes, "levels", {"set": {"all": cluster_docs.levels_doc(levels)}})
            touched |= set(nodes)
        if touched:
            docs = cluster_docs.cluster_nodes(touched, levels)
            _put(changes, "nodes", diff(nodes, docs.nodes, touched))
            nodes = {name: doc for name, doc in nodes.items() if name not in touched}
            nodes.update(docs.nodes)
            in_use = {doc["topology"] for doc in nodes.values()} - {None}
            wanted = {key: docs.topologies.get(key) or topologies[key] for key in in_use}
            _put(changes, "topologies", diff(topologies, wanted))
            topologies = wanted
        summary = {"all": cluster_docs.cluster_summary(nodes)}
        _put(changes, "summary", diff(state["summary"], summary))
        _put(changes, "domains", diff(state["domains"], cluster_docs.domain_free_gpus(nodes)))
        return changes

    def sample(self) -> State:
        return {
            "stranded": {"all": cluster_docs.cluster_stranded(self.cluster)},
            "telemetry": cluster_docs.cluster_telemetry(),
            "sources": cluster_docs.telemetry_sources(),
        }


NO_LEVELS: list[str] = []  # the Node page shows no domain: a Topology does not move it


class NodeView(LiveView):
    """Node detail page: one node (topology, holders), its GPUs' latest telemetry and the last
    hour of per-GPU rollups (sampled)."""

    name = "node"
    sample_every = 10.0
    HANDLES = NODE_EVENTS
    REREADS_ON_UNKNOWN = False  # an unknown type names no node

    def build(self) -> State:
        docs = cluster_docs.cluster_nodes([self.param], levels=NO_LEVELS)
        return {"node": docs.nodes, "topologies": docs.topologies}

    def changes(self, state: State, events: Sequence[EventRow]) -> Changes | None:
        if self.param not in _nodes_of(events):
            return None
        changes: Changes = {}
        docs = cluster_docs.cluster_nodes([self.param], levels=NO_LEVELS)
        _put(changes, "node", diff(state["node"], docs.nodes, [self.param]))
        _put(changes, "topologies", diff(state["topologies"], docs.topologies))
        return changes

    def sample(self) -> State:
        return {
            "telemetry": node_docs.node_gpu_telemetry(self.param),
            "series": node_docs.node_gpu_series(self.param),
        }


class PlacementsView(LiveView):
    """Placements page: the newest decisions (bound or not), newest first."""

    name = "placements"
    HANDLES = DECISION_EVENTS
    REREADS_ON_UNKNOWN = False  # decisions never change once written

    def build(self) -> State:
        return {"decisions": placement_docs.decisions(placement_docs.decision_ids())}

    def changes(self, state: State, events: Sequence[EventRow]) -> Changes | None:
        if not self.concerned(events):
            return None
        changes: Changes = {}
        shown = state["decisions"]
        ids = {str(i) for i in placement_docs.decision_ids()}
        window = {key: shown[key] for key in ids & set(shown)}  # decisions never change
        window.update(placement_docs.decisions([int(i) for i in ids - set(shown)]))
        _put(changes, "decisions", diff(shown, window))
        return changes


class QueuesView(LiveView):
    """Queues page: where the queues come from, cluster queues (quota, use, borrowing, fair
    share), local queues, and the workloads waiting for quota or nodes with position and reason;
    estimated starts are sampled (they move with the clock)."""

    name = "queues"
    sample_every = 5.0
    HANDLES = QUEUE_EVENTS | {QueueSourceChanged}

    def build(self) -> State:
        waiting = queue_docs.pending_workloads()
        return {
            "cluster_queues": queue_docs.cluster_queues(),
            "local_queues": queue_docs.local_queues(),
            "pending": waiting.docs,
            "positions": waiting.positions,
            "summary": {"all": queue_docs.queue_summary()},
            "source": {"current": queue_docs.queue_source()},
        }

    def changes(self, state: State, events: Sequence[EventRow]) -> Changes | None:
        if not self.concerned(events):
            return None
        changes: Changes = {}
        for name, docs in self.build().items():
            _put(changes, name, diff(state[name], docs))
        return changes

    def sample(self) -> State:
        return {"starts": queue_docs.pending_workloads().starts}


class TenantsView(LiveView):
    """Tenants page: each tenant's workloads, pods and GPUs now; and the last hour of held vs
    busy GPUs, overRequest and right-sizing advice (sampled: allocations joined with the
    telemetry rollups, scheduling.selectors.efficiency)."""

    name = "tenants"
    sample_every = 15.0
    HANDLES = QUEUE_EVENTS

    def build(self) -> State:
        return {"tenants": tenant_docs.tenants()}

    def changes(self, state: State, events: Sequence[EventRow]) -> Changes | None:
        if not self.concerned(events):
            return None
        changes: Changes = {}
        _put(changes, "tenants", diff(state["tenants"], tenant_docs.tenants()))
        return changes

    def sample(self) -> State:
        return tenant_docs.usage()


def _nodes_of(events: Sequence[EventRow]) -> set[str]:
    return {
        node
        for _, event in events
        if type(event) in NODE_EVENTS and (node := getattr(event, "node", ""))
    }


VIEWS: dict[str, type[LiveView]] = {
    view.name: view for view in (ClusterView, NodeView, PlacementsView, QueuesView, TenantsView)
}


def view_for(key: str) -> LiveView:
    """`cluster`, `placements`, ... or `node:<name>`."""
    name, _, param = key.partition(":")
    if name not in VIEWS or (name == "node") != bool(param):
        raise KeyError(key)
    return VIEWS[name](param)
