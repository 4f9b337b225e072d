"""The quota book: what every cluster queue uses per (flavor, resource), and whether more fits,
through Kueue's tree of cohorts (hierarchical cohorts: site/content/en/docs/concepts/cohort.md,
and the quota arithmetic of pkg/cache/scheduler/resource_node.go in kubernetes-sigs/kueue).

Every node of a tree (a cluster queue, or a cohort) has, per (flavor, resource), a nominal quota N
(a cohort's is *additional* quota, a pool for the queues below it), a borrowingLimit B and a
lendingLimit L (canonical units, resources.py). Then:
- `subtree` = N + the sum over its children of (their subtree - their local quota): what the node
  and everything below it brings;
- `local` = max(0, subtree - L) with a lending limit, else 0: the part that is never lent to the
  parent (for a queue: N - L, its guaranteed quota);
- a queue's usage is what its workloads hold; a cohort's usage is the sum over its children of what
  they use beyond their local quota;
- `available` (what a queue may still take): a root has subtree - usage; any other node has its
  unused local quota plus what its parent has available, capped with a borrowing limit by
  (subtree - local) - (usage beyond local) + B: what it lends up and has not taken back, plus B;
- a queue without a cohort is a root: it never uses more than N. A queue *borrows* what it uses
  above N.

Fair sharing is Kueue's dominant resource share (pkg/cache/scheduler/fair_sharing.go): for a node
with a parent and each resource r, `borrowed_r = sum over flavors of max(0, usage - subtree)`, the
ratio is `borrowed_r * 1000 / lendable_r` where lendable_r sums what the parent could ever offer
of r, the share is the largest ratio (integer arithmetic) divided by the node's weight
(`share * 1000 / weight_milli`); weight 0 while borrowing gives the largest share possible; a root
(and a queue outside any cohort) has share 0. `path_shares` gives a queue's share and every
ancestor's at the level where it competes, for the admission tournament (admission.py).

Idle-held capacity counts against the holder: with `idle_weight` w > 0, what a queue's admitted
workloads hold but do not use (telemetry, scheduling.selectors.efficiency) is added w times to its
usage in its own share, so of two queues borrowing the same, the one sitting on idle GPUs ranks
behind. Only the share changes; quota limits still count requests.
"""

from __future__ import annotations

import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from scheduling.core.queueing.config import ClusterQueue, Cohort, ResourceQuota
from scheduling.core.queueing.resources import format_quantity

FlavorResource = tuple[str, str]  # (flavor, resource)
Usage = Mapping[FlavorResource, int]
MAX_SHARE = sys.maxsize


@dataclass(eq=False)
class _Node:
    name: str
    quotas: dict[FlavorResource, ResourceQuota]
    weight: float = 1.0
    is_queue: bool = False
    parent: _Node | None = None
    children: list[_Node] = field(default_factory=list)
    subtree: dict[FlavorResource, int] = field(default_factory=dict)
    usage: dict[FlavorResource, int] = field(default_factory=dict)

    def local(self, fr: FlavorResource) -> int:
        quota = self.quotas.get(fr)
        if quota is None or quota.lending_limit is None:
            return 0
        return max(0, self.subtree.get(fr, 0) - quota.lending_limit)

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.local(fr) - self.usage.get(fr, 0))

    def root(self) -> _Node:
        node = self
        while node.parent is not None:
            node = node.parent
        return node


class QuotaBook:
    def __init__(
        self,
        cluster_queues: Iterable[ClusterQueue],
        usage: Mapping[str, Usage] | None = None,
        *,
        cohorts: Iterable[Cohort] = (),
        idle_weight: float = 0.0,
    ) -> None:
        self.queues: dict[str, ClusterQueue] = {cq.name: cq for cq in cluster_queues}
        self.idle_weight = idle_weight
        self.idle: dict[str, dict[FlavorResource, int]] = {name: {} for name in self.queues}
        self._cohorts = _cohort_nodes(self.queues.values(), cohorts)
        self._queues: dict[str, _Node] = {}
        for cq in self.queues.values():
            node = _Node(cq.name, {(f, r): q for f, r, q in cq.flavor_resources()}, cq.weight, True)
            if cq.cohort:
                node.parent = self._cohorts[cq.cohort]
                node.parent.children.append(node)
            self._queues[cq.name] = node
        for node in self._cohorts.values():
            if node.parent is None:
                _accumulate(node)
        for node in self._queues.values():
            if node.parent is None:
                _accumulate(node)
        self.usage: dict[str, dict[FlavorResource, int]] = {
            name: node.usage for name, node in self._queues.items()
        }
        for name, amounts in (usage or {}).items():
            self.charge(name, amounts)

    # --- reading ---------------------------------------------------------------------------------

    def quota(self, cq: str, fr: FlavorResource) -> ResourceQuota | None:
        return self._queues[cq].quotas.get(fr)

    def used(self, cq: str, fr: FlavorResource) -> int:
        return self.usage[cq].get(fr, 0)

    def members(self, cq: str) -> list[str]:
        """The cluster queues sharing quota with `cq` (itself included): its whole cohort tree."""
        root = self._queues[cq].root()
        out: list[str] = []
        stack = [root]
        while stack:
            node = stack.pop()
            if node.is_queue:
                out.append(node.name)
            stack.extend(node.children)
        return sorted(out)

    def cohort_of(self, cq: str) -> str:
        return self.queues[cq].cohort

    def borrowed(self, cq: str, fr: FlavorResource) -> int:
        quota = self.quota(cq, fr)
        nominal = quota.nominal if quota else 0
        return max(0, self.used(cq, fr) - nominal)

    def is_borrowing(self, cq: str, frs: Iterable[FlavorResource] | None = None) -> bool:
        keys = self.usage[cq] if frs is None else frs
        return any(self.borrowed(cq, fr) > 0 for fr in keys)

    def available(self, cq: str, fr: FlavorResource) -> int:
        """How much more `cq` could take of `fr` right now, borrowing included."""
        node = self._queues[cq]
        if fr not in node.quotas:
            return 0
        return max(0, _available(node, fr))

    def max_capacity(self, cq: str, fr: FlavorResource) -> int:
        """The most `cq` could ever hold of `fr`: its limits with the whole tree idle."""
        node = self._queues[cq]
        if fr not in node.quotas:
            return 0
        return _potential(node, fr)

    def fits(self, cq: str, add: Usage, *, allow_borrowing: bool = True) -> str | None:
        """None when `add` fits in `cq` now, else why not (Kueue-style message)."""
        borrows = self.queues[cq].cohort != ""
        for fr, amount in sorted(add.items()):
            if amount <= 0:
                continue
            flavor, resource = fr
            quota = self.quota(cq, fr)
            if quota is None:
                return f"flavor {flavor} has no quota for {resource}"
            within = self.used(cq, fr) + amount <= quota.nominal
            if (not allow_borrowing and not within) or amount > self.available(cq, fr):
                return self._insufficient(cq, fr, amount, borrowing=borrows and allow_borrowing)
        return None

    def _insufficient(self, cq: str, fr: FlavorResource, amount: int, *, borrowing: bool) -> str:
        flavor, resource = fr
        if amount > self.max_capacity(cq, fr):
            return (
                f"insufficient quota for {resource} in flavor {flavor}: request "
                f"{format_quantity(resource, amount)} > maximum capacity "
                f"{format_quantity(resource, self.max_capacity(cq, fr))}"
            )
        free = self.available(cq, fr)
        if not borrowing:
            free = min(free, max(0, self._nominal_room(cq, fr)))
        return (
            f"insufficient unused quota for {resource} in flavor {flavor}: "
            f"{format_quantity(resource, amount - free)} more needed"
        )

    def _nominal_room(self, cq: str, fr: FlavorResource) -> int:
        quota = self.quota(cq, fr)
        return (quota.nominal if quota else 0) - self.used(cq, fr)

    def dominant_resource_share(self, cq: str, add: Usage | None = None) -> tuple[int, str]:
        """Kueue's weighted DRS of `cq`, with `add` counted as if admitted (module doc)."""
        node = self._queues[cq]
        idle = self.idle[cq]
        extra = dict(add or {})
        for fr, amount in idle.items():
            held = round(self.idle_weight * amount)
            if held:
                extra[fr] = extra.get(fr, 0) + held
        return _share(node, extra)

    def path_shares(self, cq: str, add: Usage) -> list[tuple[str, int]]:
        """With `add` admitted to `cq`: (cohort, share of its child on the way up) from the queue's
        cohort to the root. The queue's own share counts idle-held capacity (module doc)."""
        node = self._queues[cq]
        if node.parent is None:
            return []
        out = [(node.parent.name, self.dominant_resource_share(cq, add)[0])]
        self.charge(cq, add)
        try:
            ancestor = node.parent
            while ancestor.parent is not None:
                out.append((ancestor.parent.name, _share(ancestor, {})[0]))
                ancestor = ancestor.parent
        finally:
            self.charge(cq, add, -1)
        return out

    def cohort_names(self) -> list[str]:
        """Every cohort of the trees, named by an object, a queue or a parent."""
        return sorted(self._cohorts)

    def cohort_parent(self, cohort: str) -> str:
        parent = self._cohorts[cohort].parent
        return parent.name if parent is not None else ""

    def cohort_resources(self, cohort: str) -> dict[FlavorResource, tuple[int, int, int]]:
        """Per (flavor, resource) of the cohort's subtree: (its own nominal quota, the quota of
        its whole subtree, what its subtree uses of that beyond the local quotas below)."""
        node = self._cohorts[cohort]
        return {
            fr: (node.quotas[fr].nominal if fr in node.quotas else 0, total, node.usage.get(fr, 0))
            for fr, total in sorted(node.subtree.items())
        }

    def cohort_share(self, cohort: str) -> int:
        """The cohort's weighted share at its parent's level (0 for a root)."""
        return _share(self._cohorts[cohort], {})[0]

    def cohort_chain(self, cq: str) -> list[str]:
        """`cq`'s cohort and its ancestors, nearest first."""
        out: list[str] = []
        node = self._queues[cq].parent
        while node is not None:
            out.append(node.name)
            node = node.parent
        return out

    # --- writing ---------------------------------------------------------------------------------

    def charge_idle(self, cq: str, amounts: Usage, sign: int = 1) -> None:
        """Add (sign 1) or remove (sign -1) what a workload holds idle (the share's extra term)."""
        idle = self.idle[cq]
        for fr, amount in amounts.items():
            idle[fr] = max(0, idle.get(fr, 0) + sign * amount)

    def charge(self, cq: str, amounts: Usage, sign: int = 1) -> None:
        """Add (sign 1) or remove (sign -1) a workload's usage."""
        node = self._queues[cq]
        for fr, amount in amounts.items():
            if not amount:
                continue
            if sign > 0:
                _add_usage(node, fr, amount)
            else:
                if node.usage.get(fr, 0) < amount:
                    raise ValueError(f"{cq}: usage of {fr} would go negative")
                _remove_usage(node, fr, amount)


def _cohort_nodes(queues: Iterable[ClusterQueue], cohorts: Iterable[Cohort]) -> dict[str, _Node]:
    """Every cohort named by an object, a queue or a parent, linked into trees. A cycle (never
    stored: the reader refuses it) is cut where it closes, so a bad state cannot hang a cycle."""
    specs = {c.name: c for c in cohorts}
    named = {cq.cohort for cq in queues if cq.cohort} | {
        c.parent for c in specs.values() if c.parent
    }
    nodes = {
        name: _Node(
            name,
            {(f, r): q for f, r, q in spec.flavor_resources()} if spec else {},
            spec.weight if spec else 1.0,
        )
        for name in sorted(named | set(specs))
        for spec in [specs.get(name)]
    }
    for name, node in nodes.items():
        spec = specs.get(name)
        parent = nodes.get(spec.parent) if spec and spec.parent else None
        if parent is not None and not _is_ancestor(node, parent):
            node.parent = parent
            parent.children.append(node)
    return nodes


def _is_ancestor(node: _Node, other: _Node) -> bool:
    """Whether `node` is `other` or above it."""
    walk: _Node | None = other
    while walk is not None:
        if walk is node:
            return True
        walk = walk.parent
    return False


def _accumulate(node: _Node) -> None:
    node.subtree = {fr: q.nominal for fr, q in node.quotas.items()}
    for child in node.children:
        _accumulate(child)
        for fr, amount in child.subtree.items():
            node.subtree[fr] = node.subtree.get(fr, 0) + amount - child.local(fr)


def _available(node: _Node, fr: FlavorResource) -> int:
    if node.parent is None:
        return node.subtree.get(fr, 0) - node.usage.get(fr, 0)
    from_parent = _available(node.parent, fr)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        local = node.local(fr)
        stored = node.subtree.get(fr, 0) - local
        used_above = max(0, node.usage.get(fr, 0) - local)
        from_parent = min(stored - used_above + quota.borrowing_limit, from_parent)
    return node.local_available(fr) + from_parent


def _potential(node: _Node, fr: FlavorResource) -> int:
    if node.parent is None:
        return node.subtree.get(fr, 0)
    total = node.local(fr) + _potential(node.parent, fr)
    quota = node.quotas.get(fr)
    if quota is not None and quota.borrowing_limit is not None:
        total = min(total, node.subtree.get(fr, 0) + quota.borrowing_limit)
    return total


def _add_usage(node: _Node, fr: FlavorResource, amount: int) -> None:
    room = node.local_available(fr)
    node.usage[fr] = node.usage.get(fr, 0) + amount
    if node.parent is not None and amount > room:
        _add_usage(node.parent, fr, amount - room)


def _remove_usage(node: _Node, fr: FlavorResource, amount: int) -> None:
    stored_above = node.usage.get(fr, 0) - node.local(fr)
    node.usage[fr] = node.usage.get(fr, 0) - amount
    if node.parent is not None and stored_above > 0:
        _remove_usage(node.parent, fr, min(amount, stored_above))


def _share(node: _Node, extra: Usage) -> tuple[int, str]:
    if node.parent is None:
        return 0, ""
    borrowed: dict[str, int] = defaultdict(int)
    for fr, quota in node.subtree.items():
        over = node.usage.get(fr, 0) + extra.get(fr, 0) - quota
        if over > 0:
            borrowed[fr[1]] += over
    if not borrowed:
        return 0, ""
    weight_milli = round(node.weight * 1000)
    if weight_milli <= 0:
        return MAX_SHARE, ""
    lendable = _lendable(node.parent, borrowed)
    share, dominant = -1, ""
    for resource, amount in sorted(borrowed.items()):
        if lendable.get(resource, 0) > 0:
            ratio = amount * 1000 // lendable[resource]
            if ratio > share:
                share, dominant = ratio, resource
    if share < 0:
        return 0, ""
    return share * 1000 // weight_milli, dominant


def _lendable(parent: _Node, resources: Iterable[str]) -> dict[str, int]:
    """Per resource: what `parent` could ever offer, over every flavor of its tree."""
    wanted = set(resources)
    out: dict[str, int] = defaultdict(int)
    for fr in parent.root().subtree:
        if fr[1] in wanted:
            out[fr[1]] += _potential(parent, fr)
    return out
