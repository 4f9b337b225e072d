"""Topology across nodes, as Kueue's Topology Aware Scheduling (TAS) defines it: a Topology names
node labels from the widest level to the narrowest (block, rack, hostname; GPU Feature Discovery's
`nvidia.com/gpu.clique` is a level like any other), the nodes carrying all of them form a tree of
domains, and a pod set asks for its pods to be inside one domain of a level (required), inside
the tightest domain that holds them (preferred), or only for capacity (unconstrained), optionally
in slices of `slice_size` pods each inside one domain of a slice level.

`place` chooses the domains and how many pods each node gets. It follows the semantics of Kueue's
`TASFlavorSnapshot.findTopologyAssignment` (kubernetes-sigs/kueue pkg/cache/tas_flavor_snapshot.go
and KEP-2724, re-implemented from their description), with Kueue's default BestFit profile:

1. every node counts how many pods of the set fit in its free capacity; a domain counts the sum of
   its children (at the slice level, whole slices: pods // slice size);
2. at the requested level the domains are ranked by that count, most first (ties by their label
   values); when the first holds the whole set, the one chosen is the fitting domain with the
   *least* room (BestFit: the tight spot is used, the large ones are kept for large sets);
3. when none holds it: required -> refused, naming the level and what the best domain had;
   preferred -> the next level up is tried; at the top (and for unconstrained) the set is spread
   greedily over the domains, most room first, the last one best-fit;
4. from the chosen domains downwards, each level takes as few children as it can the same way.

One difference, on purpose: when a set is spread over several domains, Kueue pools their
children before ranking; here each chosen domain is filled from its own children, which keeps
each slice inside its slice-level domain without a second pass.

The answer is a count per node; within each node the GPU topology choice of the scheduler still
applies (the shell restricts the gang to the nodes chosen here).

Which fitting domain is chosen is the `DomainFit` (a profile's `pluginConfig` for
TopologyDomains, `algorithm`): Kueue's `BestFit` above, or gpusched's `LeastFragmenting`, which
also weighs what the domains above the candidate are left with. Among the fitting domains with the
least room (BestFit's tightness), where BestFit takes the first by name, it takes the one whose
rack (then block) loses the fewest units that still made whole gangs of a common size: putting `n`
units into a domain of room `r` costs sum over the sizes s of ((r - n) mod s) - (r mod s), the
sizes being the powers of two up to the largest domain of that level were it empty (training gangs
come in powers of two). So a single pod goes to a free node of a rack already broken into, not of
an empty rack that an 8-node gang needs whole, and a gang's rack is taken from the block whose
leftover still makes whole racks. The same choice picks the racks and nodes on the way down.

A first version put the candidate's own cost before its room (2 pods into a rack of 6 free nodes,
leaving a whole 4-node gang, rather than into the rack of 4): on sim/specs/topology.yaml, where
2-node gangs and single servers are the common shapes, it lost to BestFit on allocation and p95
gang wait (docs/benchmarks.md), so tightness comes first.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from scheduling.core.plugin_args import ArgReader, ProfileError
from scheduling.core.status import Code, Status

HOSTNAME_LABEL = "kubernetes.io/hostname"
GPU_CLIQUE_LABEL = "nvidia.com/gpu.clique"
MAX_LEVELS = 16  # Kueue's TopologySpec.levels MaxItems

_NO_COUNTS: Mapping[str, int] = MappingProxyType({})

PLUGIN = "TopologyDomains"


class DomainMode(enum.StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"
    UNCONSTRAINED = "unconstrained"


class DomainFit(enum.StrEnum):
    """How a domain is chosen among those that hold a pod set."""

    BEST_FIT = "BestFit"  # Kueue TAS's default profile: the least room that fits
    LEAST_FRAGMENTING = (
        "LeastFragmenting"  # gpusched's: as tight, ties by the least broken leftover
    )


# gpusched's own choice unless a profile says BestFit: on sim/specs/topology.yaml it bound more
# gangs with higher allocation and lower p95 wait than BestFit (docs/benchmarks.md).
DEFAULT_FIT = DomainFit.LEAST_FRAGMENTING


def domain_fit(args: Mapping[str, object] | None) -> DomainFit:
    """The `TopologyDomains` plugin arguments of a profile: `{algorithm: BestFit |
    LeastFragmenting}`; ProfileError naming what is wrong."""
    reader = ArgReader(PLUGIN, args)
    name = reader.get("algorithm", str, DEFAULT_FIT.value)
    reader.done()
    try:
        return DomainFit(name)
    except ValueError:
        known = ", ".join(f.value for f in DomainFit)
        raise ProfileError(f"{PLUGIN}: unknown algorithm {name!r} (known: {known})") from None


class DomainError(ValueError):
    """A Topology or a topology request that cannot be used; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class Topology:
    """Kueue's Topology: its name and node labels, widest level first."""

    name: str
    levels: tuple[str, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.levels) <= MAX_LEVELS:
            raise DomainError(f"topology {self.name}: levels must have 1 to {MAX_LEVELS} entries")
        if len(set(self.levels)) != len(self.levels):
            raise DomainError(f"topology {self.name}: levels must be unique")
        if HOSTNAME_LABEL in self.levels[:-1]:
            raise DomainError(
                f"topology {self.name}: {HOSTNAME_LABEL} can only be the lowest level"
            )

    def index(self, level: str) -> int:
        try:
            return self.levels.index(level)
        except ValueError:
            raise DomainError(f"topology {self.name} has no level {level}") from None


@dataclass(frozen=True, slots=True)
class DomainRequest:
    """A pod set's topology request (Kueue's PodSetTopologyRequest) with the topology it is
    judged by (its flavor's)."""

    topology: Topology
    mode: DomainMode
    level: str = ""  # a node label of the topology; unconstrained: the lowest level
    slice_level: str = ""
    slice_size: int = 0

    def __post_init__(self) -> None:
        if self.mode is not DomainMode.UNCONSTRAINED:
            self.topology.index(self.level)
        if bool(self.slice_level) != (self.slice_size > 0):
            raise DomainError("a slice needs both its level and a size of at least 1")
        if self.slice_level:
            slice_at = self.topology.index(self.slice_level)
            if self.mode is not DomainMode.UNCONSTRAINED and slice_at < self.level_index:
                raise DomainError(
                    f"slice level {self.slice_level} must not be above the {self.mode.value} "
                    f"level {self.level}"
                )

    @property
    def level_index(self) -> int:
        if self.mode is DomainMode.UNCONSTRAINED:
            return len(self.topology.levels) - 1
        return self.topology.index(self.level)

    @property
    def slice_index(self) -> int | None:
        return self.topology.index(self.slice_level) if self.slice_level else None


REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_ANNOTATION = "kueue.x-k8s.io/podset-preferred-topology"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
SLICE_REQUIRED_ANNOTATION = "kueue.x-k8s.io/podset-slice-required-topology"
SLICE_SIZE_ANNOTATION = "kueue.x-k8s.io/podset-slice-size"


@dataclass(frozen=True, slots=True)
class DomainAsk:
    """A pod set's topology request before it meets a topology (its flavor's, known at
    admission): what the pod template's Kueue annotations or the REST API's pod set say. An
    empty `level` with slices: anywhere, each slice inside one domain of its level."""

    mode: DomainMode
    level: str = ""
    slice_level: str = ""
    slice_size: int = 0

    def on(self, topology: Topology) -> DomainRequest:
        """The request judged by `topology`; DomainError naming a level it does not have."""
        level = self.level or (topology.levels[0] if self.mode is DomainMode.PREFERRED else "")
        return DomainRequest(topology, self.mode, level, self.slice_level, self.slice_size)

    def json(self) -> dict[str, str | int]:
        out: dict[str, str | int] = {"mode": self.mode.value}
        if self.level:
            out["level"] = self.level
        if self.slice_level:
            out["sliceLevel"], out["sliceSize"] = self.slice_level, self.slice_size
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, object]) -> DomainAsk | None:
        """What `json` wrote ({} -> None)."""
        if not doc:
            return None
        size = doc.get("sliceSize", 0)
        return cls(
            DomainMode(str(doc["mode"])),
            str(doc.get("level", "")),
            str(doc.get("sliceLevel", "")),
            size if isinstance(size, int) else 0,
        )


def ask_of_annotations(annotations: Mapping[str, str]) -> DomainAsk | None:
    """Kueue's pod-set topology annotations (apis/kueue/v1beta1/topology_types.go) as a request;
    None without any. DomainError naming the annotation that is wrong."""
    required = annotations.get(REQUIRED_ANNOTATION, "")
    preferred = annotations.get(PREFERRED_ANNOTATION, "")
    unconstrained = annotations.get(UNCONSTRAINED_ANNOTATION)
    slice_level = annotations.get(SLICE_REQUIRED_ANNOTATION, "")
    raw_size = annotations.get(SLICE_SIZE_ANNOTATION)
    if unconstrained not in (None, "true", "false"):
        raise DomainError(f"{UNCONSTRAINED_ANNOTATION} must be true or false")
    given = [
        a
        for a, on in (
            (REQUIRED_ANNOTATION, required),
            (PREFERRED_ANNOTATION, preferred),
            (UNCONSTRAINED_ANNOTATION, unconstrained == "true"),
        )
        if on
    ]
    if len(given) > 1:
        raise DomainError(f"{given[0]} and {given[1]} must not both be set")
    if bool(slice_level) != (raw_size is not None):
        raise DomainError(f"{SLICE_REQUIRED_ANNOTATION} and {SLICE_SIZE_ANNOTATION} go together")
    size = 0
    if raw_size is not None:
        if not raw_size.isdigit() or int(raw_size) < 1:
            raise DomainError(f"{SLICE_SIZE_ANNOTATION} must be a whole number of pods, at least 1")
        size = int(raw_size)
    if required:
        return DomainAsk(DomainMode.REQUIRED, required, slice_level, size)
    if preferred or slice_level:
        return DomainAsk(DomainMode.PREFERRED, preferred, slice_level, size)
    if unconstrained == "true":
        return DomainAsk(DomainMode.UNCONSTRAINED)
    return None


@dataclass(frozen=True, slots=True)
class PodShape:
    """What each pod of the set takes on a node, in the scheduler's units."""

    gpus: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True, slots=True)
class NodeRoom:
    """A node as the placement sees it: its labels and what is free on it now. `eligible` is
    False where the pod set may not go at all (selector, taint, GPU model, cordon)."""

    name: str
    labels: Mapping[str, str]
    free_gpus: int
    free_cpu_milli: int
    free_memory_mib: int
    eligible: bool = True

    def pods_that_fit(self, shape: PodShape) -> int:
        if not self.eligible:
            return 0
        limits = [
            free // need
            for free, need in (
                (self.free_gpus, shape.gpus),
                (self.free_cpu_milli, shape.cpu_milli),
                (self.free_memory_mib, shape.memory_mib),
            )
            if need > 0
        ]
        return max(0, min(limits)) if limits else 0


@dataclass(frozen=True, slots=True)
class DomainPlacement:
    """Where a pod set goes: the domains of the level it was fitted at (label values from the
    widest level down), and how many pods each node gets."""

    level: str
    domains: tuple[tuple[str, ...], ...]
    pods_per_node: Mapping[str, int] = field(default_factory=lambda: _NO_COUNTS)

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(self.pods_per_node)


def level_noun(label: str) -> str:
    """How a reason names a level: `cloud.provider.com/topology-rack` -> "rack", the hostname
    level -> "node", GFD's clique -> "NVLink domain"."""
    if label == HOSTNAME_LABEL:
        return "node"
    if label == GPU_CLIQUE_LABEL:
        return "NVLink domain"
    return label.rsplit("/", 1)[-1].removeprefix("topology-")


@dataclass
class _Domain:
    values: tuple[str, ...]
    children: list[_Domain] = field(default_factory=list)
    node: str = ""  # set on leaves (the nodes, under the lowest level)
    room: int = 0  # in units of the level: pods, or whole slices at and above the slice level
    free_gpus: int = 0
    parent: _Domain | None = None
    full: int = 0  # its room were it empty (each node as the roomiest node now), same units
    sizes: tuple[int, ...] = ()  # the gang sizes its leftover is judged by (LeastFragmenting)
    sliced: bool = False  # its room counts slices


@dataclass(frozen=True, slots=True)
class _Chooser:
    """Which of the domains that hold `need` units is taken."""

    fit: DomainFit

    def __call__(self, ranked: list[_Domain], need: int) -> _Domain:
        fitting = [d for d in ranked if d.room >= need]
        if self.fit is DomainFit.BEST_FIT:
            return _best_fit(fitting)
        return min(fitting, key=lambda d: (d.room, _broken_above(d, need), d.values))


def _waste(room: int, sizes: tuple[int, ...]) -> int:
    return sum(room % s for s in sizes)


def _broken_above(domain: _Domain, need: int) -> tuple[int, ...]:
    """How many more units stop making whole gangs of their sizes when `need` are taken, in
    each domain above `domain` (counted in the same units), the nearest first."""
    cost: list[int] = []
    at = domain.parent
    while at is not None and at.sliced == domain.sliced:
        cost.append(_waste(at.room - need, at.sizes) - _waste(at.room, at.sizes))
        at = at.parent
    return tuple(cost)


def place(
    request: DomainRequest,
    nodes: Sequence[NodeRoom],
    shape: PodShape,
    count: int,
    fit: DomainFit = DEFAULT_FIT,
) -> DomainPlacement | Status:
    """Where `count` pods of `shape` go under `request`, the domains chosen by `fit`, or an
    UNSCHEDULABLE Status whose reason names the level and what was short. Pure: `nodes` are not
    changed."""
    choose = _Chooser(fit)
    if count <= 0:
        return DomainPlacement(request.topology.levels[request.level_index], (), {})
    slice_size = request.slice_size or 1
    if request.slice_level and count % slice_size:
        return Status.of(
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"{count} pods cannot be cut into slices of {slice_size}",
            plugin=PLUGIN,
        )
    levels = _build(request.topology, nodes, shape, request.slice_index, slice_size)
    slice_at = request.slice_index
    wanted = count // slice_size if slice_at is not None else count

    def units_at(level: int) -> int:
        return wanted if slice_at is not None and level <= slice_at else count

    level = request.level_index
    while True:
        ranked = _ranked(levels[level])
        need = units_at(level)
        if ranked and ranked[0].room >= need:
            chosen = [choose(ranked, need)]
            assigned = [need]
            break
        if request.mode is DomainMode.REQUIRED or not ranked:
            return _short(request, level, ranked, count, shape, slice_size, spread=False)
        if level > 0 and request.mode is DomainMode.PREFERRED:
            level -= 1
            continue
        spread = _spread(choose, ranked, need)
        if spread is None:
            return _short(request, level, ranked, count, shape, slice_size, spread=True)
        chosen, assigned = spread
        break

    pods: dict[str, int] = {}
    for domain, units in zip(chosen, assigned, strict=True):
        _descend(choose, domain, units, level, slice_at, slice_size, pods)
    return DomainPlacement(
        request.topology.levels[level], tuple(sorted(d.values for d in chosen)), pods
    )


def _build(
    topology: Topology,
    nodes: Sequence[NodeRoom],
    shape: PodShape,
    slice_at: int | None,
    slice_size: int,
) -> list[list[_Domain]]:
    """The domain tree, level by level, with each domain's room. Nodes missing a level's label
    are outside the topology (as in Kueue)."""
    depth = len(topology.levels)
    by_values: list[dict[tuple[str, ...], _Domain]] = [{} for _ in range(depth)]
    leaves: list[_Domain] = []
    for node in nodes:
        values = tuple(node.labels.get(label) for label in topology.levels)
        if any(v is None for v in values):
            continue
        path = tuple(v for v in values if v is not None)
        parent: _Domain | None = None
        for level in range(depth):
            key = path[: level + 1]
            domain = by_values[level].get(key)
            if domain is None:
                domain = by_values[level][key] = _Domain(key, parent=parent)
                if parent is not None:
                    parent.children.append(domain)
            parent = domain
        assert parent is not None
        # Nodes hang under the lowest level (several may share its value when it is not the
        # hostname).
        leaf = _Domain(path + (node.name,), node=node.name, parent=parent)
        leaf.room, leaf.free_gpus = node.pods_that_fit(shape), node.free_gpus
        parent.children.append(leaf)
        leaves.append(leaf)
    roomiest = max((leaf.room for leaf in leaves), default=0)
    for leaf in leaves:
        leaf.full, leaf.sizes = roomiest, _powers_of_two(roomiest)
    for level in reversed(range(depth)):
        for domain in by_values[level].values():
            domain.room = sum(c.room for c in domain.children)
            domain.full = sum(c.full for c in domain.children)
            domain.free_gpus = sum(c.free_gpus for c in domain.children)
            domain.sliced = slice_at is not None and level <= slice_at
            if level == slice_at:
                domain.room //= slice_size
                domain.full //= slice_size
        sizes = _powers_of_two(max((d.full for d in by_values[level].values()), default=0))
        for domain in by_values[level].values():
            domain.sizes = sizes
    return [list(d.values()) for d in by_values]


def _powers_of_two(up_to: int) -> tuple[int, ...]:
    return tuple(1 << k for k in range(up_to.bit_length()) if 1 << k <= up_to)


def _ranked(domains: list[_Domain]) -> list[_Domain]:
    """Most room first; equal room in the order of their label values (Kueue's sortedDomains)."""
    return sorted(domains, key=lambda d: (-d.room, d.values))


def _best_fit(fitting: list[_Domain]) -> _Domain:
    """Of the ranked domains that hold the set, the one with the least room (the first of
    equals): Kueue's findBestFitDomainIdx."""
    least = min(d.room for d in fitting)
    return next(d for d in fitting if d.room == least)


def _spread(
    choose: _Chooser, ranked: list[_Domain], need: int
) -> tuple[list[_Domain], list[int]] | None:
    """Greedy over the ranked domains, most room first, the last one chosen among those that
    hold the rest; None if all of them together are short."""
    chosen: list[_Domain] = []
    assigned: list[int] = []
    remaining = need
    pool = [d for d in ranked if d.room > 0]
    while remaining > 0 and pool:
        domain = choose(pool, remaining) if pool[0].room >= remaining else pool[0]
        take = min(domain.room, remaining)
        chosen.append(domain)
        assigned.append(take)
        remaining -= take
        pool.remove(domain)
    return (chosen, assigned) if remaining == 0 else None


def _descend(
    choose: _Chooser,
    domain: _Domain,
    units: int,
    level: int,
    slice_at: int | None,
    slice_size: int,
    pods: dict[str, int],
) -> None:
    """Hand `units` of `domain` down to as few children as hold them, until nodes."""
    if level == slice_at:
        units *= slice_size  # below the slice level, pods are counted
    if not domain.children:
        pods[domain.node] = pods.get(domain.node, 0) + units
        return
    spread = _spread(choose, _ranked(domain.children), units)
    assert spread is not None, "a domain's room is the sum of its children's"
    for child, taken in zip(*spread, strict=True):
        _descend(choose, child, taken, level + 1, slice_at, slice_size, pods)


def _short(
    request: DomainRequest,
    level: int,
    ranked: list[_Domain],
    count: int,
    shape: PodShape,
    slice_size: int,
    *,
    spread: bool,
) -> Status:
    """Why the set does not fit: the level, what was asked, and what the best domain (or, when
    spread, all of them together) had."""
    label = request.topology.levels[level]
    noun = level_noun(label)
    if not ranked:
        return Status.of(
            Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
            f"no node carries the labels of topology {request.topology.name} down to {label}",
            plugin=PLUGIN,
        )
    ask = (
        f"{count} pods x {shape.gpus} GPUs ({count * shape.gpus} GPUs)"
        if shape.gpus
        else (f"{count} pods")
    )
    if request.slice_level:
        ask += f" in slices of {slice_size} per {level_noun(request.slice_level)}"
    per_slice = slice_size if request.slice_level else 1

    def room(pods: int, gpus: int) -> str:
        return f"{pods} pods ({gpus} free GPUs)" if shape.gpus else f"{pods} pods"

    if spread:
        pods = sum(d.room for d in ranked) * per_slice
        return Status.of(
            Code.UNSCHEDULABLE,
            f"topology {request.topology.name} has no room for {ask}: its {noun}s together "
            f"have room for {room(pods, sum(d.free_gpus for d in ranked))}",
            plugin=PLUGIN,
        )
    best = ranked[0]
    return Status.of(
        Code.UNSCHEDULABLE,
        f"no {noun} ({label}) holds {ask}: the largest, {'/'.join(best.values)}, has room for "
        f"{room(best.room * per_slice, best.free_gpus)}",
        plugin=PLUGIN,
    )
