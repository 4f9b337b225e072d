"""Invariants over random clusters and pod streams, checked against a ledger kept outside the
snapshot."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.snapshot import ClusterSnapshot
from scheduling.core.types import MILLI_PER_GPU, NodeSpec, PodRequest, TopologyPolicy, TopologyScope
from tests.builders import TOPOLOGY_NAMES, make_node, make_pod
from tests.scheduling.core.helpers import framework

MIG_LAYOUT = ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb")


@st.composite
def clusters(draw: st.DrawFn) -> list[NodeSpec]:
    count = draw(st.integers(1, 6))
    nodes = []
    for i in range(count):
        kind = draw(st.sampled_from((*TOPOLOGY_NAMES, "mig")))
        builder = make_node(f"n{i}").cpu(draw(st.sampled_from((16_000, 64_000, 224_000))))
        builder = builder.mig(MIG_LAYOUT, MIG_LAYOUT) if kind == "mig" else builder.topology(kind)
        nodes.append(builder.build())
    return nodes


@st.composite
def pods(draw: st.DrawFn, uid: str) -> PodRequest:
    builder = (
        make_pod(uid)
        .cpu(draw(st.sampled_from((0, 500, 4000, 32_000))))
        .memory(draw(st.sampled_from((0, 1024, 65536))))
    )
    form = draw(st.sampled_from(("cpu", "whole", "whole", "share", "mig")))
    if form == "whole":
        builder = builder.gpus(draw(st.sampled_from((1, 1, 2, 4, 8))))
        policy = draw(st.sampled_from(list(TopologyPolicy)))
        scope = draw(st.sampled_from((None, *TopologyScope)))
        builder = builder.policy(policy, scope)
    elif form == "share":
        builder = builder.share(draw(st.integers(1, 999)))
    elif form == "mig":
        builder = builder.mig(
            draw(st.sampled_from(("1g.10gb", "2g.20gb", "3g.40gb"))), draw(st.integers(1, 2))
        )
    return builder.build()


pod_streams = st.integers(1, 40).flatmap(lambda n: st.tuples(*(pods(f"p{i}") for i in range(n))))


@settings(max_examples=150, deadline=None)
@given(nodes=clusters(), stream=pod_streams)
def test_no_resource_is_ever_over_committed(
    nodes: list[NodeSpec], stream: tuple[PodRequest, ...]
) -> None:
    snapshot = ClusterSnapshot(nodes)
    fw = framework()
    gpu_milli: dict[tuple[str, int], int] = defaultdict(int)
    cpu: dict[str, int] = defaultdict(int)
    memory: dict[str, int] = defaultdict(int)
    mig_slots: set[tuple[str, int, int]] = set()
    by_name = {node.name: node for node in nodes}
    for pod in stream:
        decision = fw.schedule_one(pod, snapshot)
        placement = decision.placement
        if placement is None:
            continue
        node = by_name[placement.node]
        # Reserved GPUs exist on the node and are whole GPUs (not MIG-partitioned ones).
        assert all(
            0 <= g < len(node.gpus) and not node.gpus[g].mig_layout for g in placement.gpu_indices
        )
        assert len(set(placement.gpu_indices)) == len(placement.gpu_indices)
        assert len(placement.gpu_indices) == pod.gpus + (1 if pod.gpu_milli else 0)
        for g in placement.gpu_indices:
            gpu_milli[(node.name, g)] += placement.milli_per_gpu
            assert gpu_milli[(node.name, g)] <= MILLI_PER_GPU
        for gpu, slot in placement.mig_slots:
            key = (node.name, gpu, slot)
            assert key not in mig_slots and node.gpus[gpu].mig_layout[slot] == pod.mig_profile
            mig_slots.add(key)
        assert len(placement.mig_slots) == pod.mig_count
        cpu[node.name] += pod.cpu_milli
        memory[node.name] += pod.memory_mib
        assert cpu[node.name] <= node.cpu_milli and memory[node.name] <= node.memory_mib
        assert sum(placement.numa_cpu_milli) == pod.cpu_milli
        if pod.topology_policy is TopologyPolicy.SINGLE_NUMA_NODE and pod.gpus:
            numa = node.topology.gpu_numa if node.topology else ()
            assert len({numa[g] for g in placement.gpu_indices}) == 1
            assert sum(1 for share in placement.numa_cpu_milli if share) <= 1
    assert (snapshot.numa_cpu_free >= 0).all()
    assert (snapshot.gpu_free[snapshot.gpu_free >= 0] <= MILLI_PER_GPU).all()


@settings(max_examples=60, deadline=None)
@given(nodes=clusters(), stream=pod_streams)
def test_identical_input_gives_identical_decisions(
    nodes: list[NodeSpec], stream: tuple[PodRequest, ...]
) -> None:
    def run() -> list[tuple[object, str]]:
        snapshot = ClusterSnapshot(nodes)
        fw = framework()
        return [
            (d.placement, d.summary()) for d in (fw.schedule_one(pod, snapshot) for pod in stream)
        ]

    assert run() == run()


@settings(max_examples=60, deadline=None)
@given(nodes=clusters(), stream=pod_streams)
def test_forgetting_every_placement_restores_the_empty_cluster(
    nodes: list[NodeSpec], stream: tuple[PodRequest, ...]
) -> None:
    snapshot = ClusterSnapshot(nodes)
    empty = ClusterSnapshot(nodes)
    fw = framework()
    decisions = [fw.schedule_one(pod, snapshot) for pod in stream]
    for decision in reversed(decisions):
        fw.forget(decision, snapshot)
    for column in (
        "cpu_free",
        "memory_free",
        "numa_cpu_free",
        "gpu_free",
        "full_free_mask",
        "mig_free",
        "max_share_free",
    ):
        assert np.array_equal(getattr(snapshot, column), getattr(empty, column)), column
