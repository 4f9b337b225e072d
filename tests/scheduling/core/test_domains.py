"""Topology across nodes (scheduling.core.domains): Kueue TAS's placement of a pod set into the
domains of a Topology, its BestFit choice and gpusched's LeastFragmenting one, and its reasons."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.domains import (
    DomainError,
    DomainFit,
    DomainMode,
    DomainPlacement,
    DomainRequest,
    NodeRoom,
    PodShape,
    Topology,
    domain_fit,
    place,
)
from scheduling.core.plugin_args import ProfileError
from scheduling.core.status import Code, Status

BLOCK, RACK, HOST = (
    "cloud.provider.com/topology-block",
    "cloud.provider.com/topology-rack",
    "kubernetes.io/hostname",
)
TAS = Topology("default", (BLOCK, RACK, HOST))
GPU8 = PodShape(gpus=8, cpu_milli=1000, memory_mib=1024)


def node(block: str, rack: str, i: int, free_gpus: int = 8) -> NodeRoom:
    name = f"{block}-{rack}-n{i}"
    return NodeRoom(
        name, {BLOCK: block, RACK: f"{block}-{rack}", HOST: name}, free_gpus, 64000, 10**6
    )


def cluster(free: dict[tuple[str, str], list[int]]) -> list[NodeRoom]:
    """Nodes by (block, rack), each with its free GPUs."""
    return [
        node(block, rack, i, gpus)
        for (block, rack), per_node in free.items()
        for i, gpus in enumerate(per_node)
    ]


def racks_of(placement: DomainPlacement, nodes: list[NodeRoom]) -> set[str]:
    by_name = {n.name: n for n in nodes}
    return {by_name[name].labels[RACK] for name in placement.pods_per_node}


def test_required_rack_is_the_best_fit_rack() -> None:
    nodes = cluster({("b1", "r1"): [8] * 8, ("b1", "r2"): [8] * 5, ("b2", "r1"): [8] * 4})
    placement = place(DomainRequest(TAS, DomainMode.REQUIRED, RACK), nodes, GPU8, 4)
    assert isinstance(placement, DomainPlacement)
    # The rack with the least room that holds 4 pods: b2-r1 (4), not b1-r1 (8) nor b1-r2 (5).
    assert racks_of(placement, nodes) == {"b2-r1"}
    assert sum(placement.pods_per_node.values()) == 4
    assert placement.domains == (("b2", "b2-r1"),)


def test_required_rack_refused_names_the_level_and_what_was_short() -> None:
    nodes = cluster({("b1", "r1"): [8] * 5 + [0] * 3, ("b1", "r2"): [8] * 3 + [4]})
    status = place(DomainRequest(TAS, DomainMode.REQUIRED, RACK), nodes, GPU8, 8)
    assert isinstance(status, Status) and status.code is Code.UNSCHEDULABLE
    assert status.message() == (
        f"no rack ({RACK}) holds 8 pods x 8 GPUs (64 GPUs): the largest, b1/b1-r1, has room "
        "for 5 pods (40 free GPUs)"
    )


def test_preferred_climbs_to_the_block_then_spreads() -> None:
    nodes = cluster({("b1", "r1"): [8] * 3, ("b1", "r2"): [8] * 3, ("b2", "r1"): [8] * 2})
    in_block = place(DomainRequest(TAS, DomainMode.PREFERRED, RACK), nodes, GPU8, 6)
    assert isinstance(in_block, DomainPlacement)
    assert in_block.level == BLOCK and in_block.domains == (("b1",),)
    spread = place(DomainRequest(TAS, DomainMode.PREFERRED, RACK), nodes, GPU8, 8)
    assert isinstance(spread, DomainPlacement)
    assert spread.level == BLOCK and len(spread.domains) == 2
    short = place(DomainRequest(TAS, DomainMode.PREFERRED, RACK), nodes, GPU8, 9)
    assert isinstance(short, Status) and "together have room for 8 pods" in short.message()


def test_least_fragmenting_keeps_an_empty_rack_whole() -> None:
    # One 8-GPU pod anywhere: every free node is as tight as the next; BestFit takes the first by
    # name, in the empty rack an 8-node gang needs whole; LeastFragmenting takes the last free
    # node of a rack already broken into.
    nodes = cluster(
        {
            ("b1", "r1"): [8] * 8,
            ("b1", "r2"): [8] + [0] * 7,
            ("b2", "r1"): [8] * 3 + [0] * 5,
        }
    )
    request = DomainRequest(TAS, DomainMode.UNCONSTRAINED)
    best = place(request, nodes, GPU8, 1, DomainFit.BEST_FIT)
    ours = place(request, nodes, GPU8, 1, DomainFit.LEAST_FRAGMENTING)
    assert isinstance(best, DomainPlacement) and isinstance(ours, DomainPlacement)
    assert racks_of(best, nodes) == {"b1-r1"}
    assert racks_of(ours, nodes) == {"b1-r2"}


def test_least_fragmenting_is_as_tight_as_best_fit() -> None:
    # 3 pods: both take the rack of 6 free nodes, not the one of 7.
    nodes = cluster({("b1", "r1"): [8] * 6 + [0] * 2, ("b1", "r2"): [8] * 7 + [0]})
    request = DomainRequest(TAS, DomainMode.REQUIRED, RACK)
    for fit in DomainFit:
        placement = place(request, nodes, GPU8, 3, fit)
        assert isinstance(placement, DomainPlacement)
        assert racks_of(placement, nodes) == {"b1-r1"}, fit


def test_the_algorithm_is_a_profile_argument() -> None:
    assert domain_fit(None) is DomainFit.LEAST_FRAGMENTING  # the default
    assert domain_fit({"algorithm": "BestFit"}) is DomainFit.BEST_FIT
    assert domain_fit({"algorithm": "LeastFragmenting"}) is DomainFit.LEAST_FRAGMENTING
    with pytest.raises(ProfileError, match="unknown algorithm 'MostFree'"):
        domain_fit({"algorithm": "MostFree"})
    with pytest.raises(ProfileError, match="unknown argument 'profile'"):
        domain_fit({"profile": "BestFit"})


@pytest.mark.parametrize("fit", list(DomainFit))
def test_slices_each_inside_one_rack(fit: DomainFit) -> None:
    # Two racks with room for 3 pods each: 4 slices of 1 fit, 2 slices of 2 fit, 1 slice of 4
    # does not.
    nodes = cluster({("b1", "r1"): [8] * 3, ("b1", "r2"): [8] * 3})

    def ask(size: int, count: int) -> DomainPlacement | Status:
        request = DomainRequest(TAS, DomainMode.REQUIRED, BLOCK, RACK, size)
        return place(request, nodes, GPU8, count, fit)

    two_by_two = ask(2, 4)
    assert isinstance(two_by_two, DomainPlacement)
    per_rack: dict[str, int] = {}
    for name, n in two_by_two.pods_per_node.items():
        rack = next(x.labels[RACK] for x in nodes if x.name == name)
        per_rack[rack] = per_rack.get(rack, 0) + n
    assert sorted(per_rack.values()) == [2, 2]
    assert isinstance(ask(4, 4), Status)
    assert isinstance(ask(3, 4), Status)  # 4 pods are not whole slices of 3


def test_gpu_clique_is_a_level_and_nodes_without_the_labels_are_outside() -> None:
    clique = "nvidia.com/gpu.clique"
    topology = Topology("nvl", (clique, HOST))
    nodes = [
        NodeRoom(f"n{i}", {clique: f"c{i // 4}", HOST: f"n{i}"}, 8, 64000, 10**6) for i in range(8)
    ] + [NodeRoom("loose", {HOST: "loose"}, 8, 64000, 10**6)]
    placement = place(DomainRequest(topology, DomainMode.REQUIRED, clique), nodes, GPU8, 4)
    assert isinstance(placement, DomainPlacement)
    assert "loose" not in placement.nodes and len(placement.nodes) == 4
    status = place(DomainRequest(topology, DomainMode.REQUIRED, clique), nodes, GPU8, 5)
    assert isinstance(status, Status)
    assert status.message().startswith("no NVLink domain (nvidia.com/gpu.clique) holds 5 pods")


def test_bad_topologies_and_requests_are_refused_by_name() -> None:
    with pytest.raises(DomainError, match="hostname can only be the lowest"):
        Topology("t", (HOST, RACK))
    with pytest.raises(DomainError, match="unique"):
        Topology("t", (RACK, RACK))
    with pytest.raises(DomainError, match="has no level example.com/zone"):
        DomainRequest(TAS, DomainMode.REQUIRED, "example.com/zone")
    with pytest.raises(DomainError, match="must not be above the required level"):
        DomainRequest(TAS, DomainMode.REQUIRED, RACK, BLOCK, 2)


# --- properties ---------------------------------------------------------------------------------

racks = st.lists(st.lists(st.integers(0, 8), min_size=1, max_size=6), min_size=1, max_size=8)


Case = tuple[list[NodeRoom], PodShape, int, DomainRequest, DomainFit]


@st.composite
def tas_cases(draw: st.DrawFn) -> Case:
    free = draw(racks)
    nodes = cluster({(f"b{k % 2}", f"r{k}"): gpus for k, gpus in enumerate(free)})
    shape = PodShape(gpus=draw(st.integers(1, 8)))
    count = draw(st.integers(1, 24))
    mode = draw(st.sampled_from(list(DomainMode)))
    level = draw(st.sampled_from([BLOCK, RACK, HOST]))
    slice_size = draw(st.sampled_from([0, 0, 1, 2]))
    slice_level = HOST if slice_size and mode is not DomainMode.UNCONSTRAINED else ""
    request = DomainRequest(TAS, mode, level, slice_level, slice_size if slice_level else 0)
    return nodes, shape, count, request, draw(st.sampled_from(list(DomainFit)))


@settings(max_examples=300, deadline=None)
@given(case=tas_cases())
def test_placements_never_over_commit_and_required_never_spans(case: Case) -> None:
    nodes, shape, count, request, fit = case
    result = place(request, nodes, shape, count, fit)
    if isinstance(result, Status):
        # Refused only when no single domain (required) or the whole topology holds it.
        fits = {n.name: n.pods_that_fit(shape) for n in nodes}
        if request.mode is not DomainMode.REQUIRED and not request.slice_level:
            assert sum(fits.values()) < count
        return
    by_name = {n.name: n for n in nodes}
    assert sum(result.pods_per_node.values()) == count
    for name, pods in result.pods_per_node.items():
        assert pods > 0 and pods * shape.gpus <= by_name[name].free_gpus  # never over-committed
    if request.mode is DomainMode.REQUIRED:
        level = TAS.index(request.level)
        spans = {
            tuple(by_name[name].labels[label] for label in TAS.levels[: level + 1])
            for name in result.pods_per_node
        }
        assert len(spans) == 1  # one domain of the required level


@settings(max_examples=200, deadline=None)
@given(case=tas_cases())
def test_required_is_refused_only_when_no_domain_of_its_level_holds_the_set(case: Case) -> None:
    nodes, shape, count, request, fit = case
    required = DomainRequest(TAS, DomainMode.REQUIRED, request.level or RACK)
    level = TAS.index(required.level)
    room: dict[tuple[str, ...], int] = {}
    for n in nodes:
        key = tuple(n.labels[label] for label in TAS.levels[: level + 1])
        room[key] = room.get(key, 0) + n.pods_that_fit(shape)
    result = place(required, nodes, shape, count, fit)
    # Both algorithms place exactly the sets that some domain holds: the choice never costs a fit.
    assert isinstance(result, DomainPlacement) == (max(room.values()) >= count)
    if isinstance(result, DomainPlacement):
        chosen = result.domains[0]
        assert room[chosen] >= count and len(result.domains) == 1
        # Either way no fitting domain has less room than the chosen one.
        assert room[chosen] == min(r for r in room.values() if r >= count)
