"""The scheduler's decisions on fixed pod streams, recorded from the code before the incremental
scoring of issue 21: a speed-up must place every pod exactly where the straightforward version did
(node, GPUs, share, CPU per NUMA node), and refuse the same pods for the same reasons.

Rewrite the fixture only for a change that means to decide differently:
`.venv/bin/python -m tests.scheduling.core.test_same_decisions --write`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from scheduling.core.profiles import load_profiles
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.snapshot import ClusterSnapshot
from sim.cluster import build_nodes, synthetic_pools
from sim.workload import synthetic_pods

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "placements.json"
PROFILE_DIR = Path(__file__).resolve().parents[3] / "scheduling" / "profiles"

# name: (profile, nodes, pods, seed, telemetry: measured GPU load refreshed every N pods, 0: none)
SCENARIOS: dict[str, tuple[str, int, int, int, int]] = {
    "gpusched": ("gpusched", 120, 1080, 11, 0),
    "gpusched-telemetry": ("gpusched", 100, 965, 5, 150),
    "topology": ("topology", 80, 700, 3, 0),
    "fgd": ("fgd", 80, 785, 8, 0),
}


def _outcome(decision: Decision) -> str:
    placement = decision.placement
    if placement is None:
        return f"- {decision.status.code.value}: {decision.summary()}"
    gpus = ",".join(map(str, placement.gpu_indices))
    cpu = ",".join(map(str, placement.numa_cpu_milli))
    scope = placement.scope.value if placement.scope else ""
    lent = " lent" if placement.reclaimed else ""
    return f"{placement.node} [{gpus}]x{placement.milli_per_gpu} cpu {cpu} {scope}{lent}".rstrip()


def _refresh_telemetry(snapshot: ClusterSnapshot, rng: np.random.Generator) -> None:
    """Measured load on every GPU, a tenth of the nodes stale, and idle allocated milli to lend."""
    shape = snapshot.gpu_load.shape
    load = np.clip(snapshot.gpu_load + rng.uniform(-0.3, 0.3, shape), 0.0, None)
    age = np.where(rng.random(len(snapshot)) < 0.1, 600.0, rng.uniform(0.0, 30.0, len(snapshot)))
    snapshot.refresh_load(load, age, 60.0)
    allocated = np.where(snapshot.gpu_free >= 0, 1000 - snapshot.gpu_free, 0)
    snapshot.refresh_reclaimable((allocated * rng.uniform(0.0, 0.6, shape)).astype(np.int64))


def outcomes(name: str) -> list[str]:
    profile_name, nodes, pods, seed, telemetry_every = SCENARIOS[name]
    profile = load_profiles((PROFILE_DIR / f"{profile_name}.yaml").read_text())[0]
    framework = Framework(profile)
    snapshot = ClusterSnapshot(build_nodes(synthetic_pools(nodes, "mixed")))
    rng = np.random.default_rng(seed)
    result = []
    for k, pod in enumerate(synthetic_pods(pods, seed=seed)):
        if telemetry_every and k % telemetry_every == 0:
            _refresh_telemetry(snapshot, rng)
        result.append(_outcome(framework.schedule_one(pod, snapshot)))
    return result


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_decisions_are_the_recorded_ones(name: str) -> None:
    recorded = json.loads(FIXTURE.read_text())[name]
    now = outcomes(name)
    first_difference = next(
        (k for k, (a, b) in enumerate(zip(recorded, now, strict=True)) if a != b), None
    )
    assert first_difference is None, (
        f"pod {first_difference}: recorded {recorded[first_difference]!r}, "
        f"now {now[first_difference]!r}"
    )


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    FIXTURE.write_text(json.dumps({name: outcomes(name) for name in SCENARIOS}, indent=0) + "\n")
