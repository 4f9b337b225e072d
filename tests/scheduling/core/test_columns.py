"""Per-shape columns kept between cycles answer what a plugin computing everything afresh would."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.cycle_state import CycleState
from scheduling.core.plugins import gpu_topology, load_aware, node_resources_fit
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot
from scheduling.profile_files import load_profile
from sim.cluster import build_nodes, synthetic_pools
from sim.workload import synthetic_pods


@settings(max_examples=15, deadline=None)
@given(st.integers(0, 10_000))
def test_warm_columns_match_a_cold_plugin(seed: int) -> None:
    rng = random.Random(seed)
    snapshot = ClusterSnapshot(build_nodes(synthetic_pools(12, "mixed")))
    framework = Framework(load_profile("gpusched"))
    warm = _plugins()
    decisions = []
    for pod in synthetic_pods(120, seed=seed):
        decision = framework.schedule_one(pod, snapshot)
        if decision.placement is not None:
            decisions.append(decision)
        if decisions and rng.random() < 0.2:  # releases change nodes too
            framework.forget(decisions.pop(rng.randrange(len(decisions))), snapshot)
        if rng.random() < 0.05:
            shape = snapshot.gpu_load.shape
            snapshot.refresh_load(
                np.random.default_rng(seed).uniform(0, 1, shape),
                np.where(np.arange(len(snapshot)) % 3 == 0, 900.0, 1.0),
                60.0,
            )
        cold = _plugins()
        everyone = np.arange(len(snapshot))
        answers = []
        for fit, load, topology, seeds in (warm, cold):
            state = CycleState()
            verdicts = fit.filter(state, pod, snapshot)
            by_topology = topology.filter(state, pod, snapshot)
            by_seeds = seeds.filter(CycleState(), pod, snapshot)
            answers.append(
                (
                    [verdicts.status(i, "fit").message() for i in range(len(snapshot))],
                    load.score(state, pod, snapshot, everyone).tolist(),
                    topology.score(state, pod, snapshot, everyone).tolist(),
                    [by_topology.status(i, "t").message() for i in range(len(snapshot))],
                    [by_seeds.status(i, "s").message() for i in range(len(snapshot))],
                    topology.filter_rows(state, pod, snapshot, everyone).tolist(),
                    by_topology.passed.tolist(),
                    fit.filter_rows(state, pod, snapshot, everyone).tolist(),
                    verdicts.passed.tolist(),
                )
            )
        warm_answer, cold_answer = answers
        assert warm_answer[:5] == cold_answer[:5]
        assert warm_answer[5] == warm_answer[6]  # the row form agrees with the whole filter
        assert warm_answer[7] == warm_answer[8]


def _plugins() -> tuple[
    node_resources_fit.NodeResourcesFit,
    load_aware.LoadAware,
    gpu_topology.GPUTopology,
    gpu_topology.GPUTopology,
]:
    """Fit, LoadAware, GPUTopology, and GPUTopology under the seeds' name (every multi-GPU pod
    on one NUMA node)."""
    return (
        node_resources_fit.new(None),
        load_aware.new(None),
        gpu_topology.new(None),
        gpu_topology.new(None, name=gpu_topology.SEEDS_NAME),
    )


def test_refreshed_measurements_touch_only_the_nodes_they_change() -> None:
    snapshot = ClusterSnapshot(build_nodes(synthetic_pools(6, "mixed")))
    before = snapshot.generation.copy()
    snapshot.refresh_load(snapshot.gpu_load.copy(), snapshot.load_age_s.copy(), 60.0)
    snapshot.refresh_reclaimable(snapshot.gpu_lendable.copy())
    assert snapshot.generation.tolist() == before.tolist()
    load, age = snapshot.gpu_load.copy(), snapshot.load_age_s.copy()
    load[2, 0] = 0.5
    age[4] = 1.0  # node 4 measured now: fresh, no longer stale
    snapshot.refresh_load(load, age, 60.0)
    lendable = snapshot.gpu_lendable.copy()
    lendable[1, 3] = 300
    snapshot.refresh_reclaimable(lendable)
    assert np.flatnonzero(snapshot.generation != before).tolist() == [1, 2, 4]
