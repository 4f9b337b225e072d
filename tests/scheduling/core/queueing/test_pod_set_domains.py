"""A gang with a topology request placed by the batch: inside one domain of its level (Kueue
TAS's BestFit domain), or waiting with the reason naming the level and what was short."""

from __future__ import annotations

from dataclasses import replace

from scheduling.core.domains import DomainAsk, DomainMode, Topology
from scheduling.core.queueing.batch import classify, schedule_batch
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import GangRef, NodeSpec, PodRequest
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework

BLOCK, RACK = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack"
TAS = Topology("default", (BLOCK, RACK, "kubernetes.io/hostname"))


def rack_nodes(rack: str, count: int) -> list[NodeSpec]:
    return [
        make_node(f"{rack}-n{k}").topology("dgx-h100").labels(**{BLOCK: "b1", RACK: rack}).build()
        for k in range(count)
    ]


def gang(
    name: str, pods: int, ask: DomainAsk | None, topology: Topology | None = TAS
) -> list[PodRequest]:
    ref = GangRef(name, pods)
    return [
        replace(
            make_pod(f"{name}-{k}").gpus(8).build(),
            gang=ref,
            domain_ask=ask,
            domain_topology=topology,
        )
        for k in range(pods)
    ]


def test_a_gang_requiring_a_rack_goes_to_the_best_fit_rack() -> None:
    snapshot = ClusterSnapshot(rack_nodes("r1", 8) + rack_nodes("r2", 4) + rack_nodes("r3", 5))
    outcome = schedule_batch(
        framework(), snapshot, gang("train", 4, DomainAsk(DomainMode.REQUIRED, RACK))
    )
    (placed,) = outcome.gangs
    assert {d.node.split("-")[0] for d in placed if d.node} == {"r2"}  # the tightest that fits


def test_without_a_rack_that_holds_it_the_gang_waits_naming_the_level() -> None:
    snapshot = ClusterSnapshot(rack_nodes("r1", 5) + rack_nodes("r2", 3))
    outcome = schedule_batch(
        framework(), snapshot, gang("train", 8, DomainAsk(DomainMode.REQUIRED, RACK))
    )
    assert not outcome.gangs and len(outcome.failed) == 8
    code, message = classify(outcome.failed[0])
    assert message == (
        f"{code}: no rack ({RACK}) holds 8 pods x 8 GPUs (64 GPUs): the largest, b1/r1, has "
        "room for 5 pods (40 free GPUs)"
    )
    # Without the request the same gang spreads over both racks.
    anywhere = schedule_batch(framework(), ClusterSnapshot(snapshot.nodes), gang("t", 8, None))
    assert len(anywhere.gangs) == 1


def test_a_request_on_a_flavor_without_topology_waits_and_says_so() -> None:
    snapshot = ClusterSnapshot(rack_nodes("r1", 2))
    outcome = schedule_batch(
        framework(), snapshot, gang("t", 2, DomainAsk(DomainMode.REQUIRED, RACK), None)
    )
    assert "names no Topology" in classify(outcome.failed[0])[1]


def test_the_profile_chooses_the_algorithm() -> None:
    """TopologyDomains' `algorithm`, for a pod placed unconstrained: BestFit takes the first free
    node by name, in the empty rack r1; LeastFragmenting the free node of r2, a rack of one
    node (already no whole gang of 2, 4 or 8 there)."""
    nodes = rack_nodes("r1", 8) + rack_nodes("r2", 1)

    def rack_for(algorithm: str) -> set[str]:
        profile = f"""
profiles:
- schedulerName: t
  plugins: {{multiPoint: {{enabled: [{{name: GPUTopology, weight: 5}}]}}}}
  pluginConfig:
  - {{name: TopologyDomains, args: {{algorithm: {algorithm}}}}}
"""
        pod = replace(
            make_pod("one").gpus(8).build(),
            domain_ask=DomainAsk(DomainMode.UNCONSTRAINED),
            domain_topology=TAS,
        )
        outcome = schedule_batch(framework(profile), ClusterSnapshot(nodes), [pod])
        return {d.node.split("-")[0] for d in outcome.placed if d.node}

    assert rack_for("BestFit") == {"r1"}
    assert rack_for("LeastFragmenting") == {"r2"}
