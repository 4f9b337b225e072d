"""The simulated kubelet's reading of a pod's requests (sim/kubernetes/pod_spec.py) is its own, so
it checks the scheduler's (scheduling/core/pod_spec.py) instead of echoing it: on any pod of app
containers, sidecars, init containers and overhead the two agree."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduling.core import pod_spec as scheduler
from sim.kubernetes import pod_spec as kubelet

QUANTITIES = {
    "cpu": st.integers(0, 64_000).map(lambda m: f"{m}m"),
    "memory": st.integers(0, 512).map(lambda g: f"{g}Gi"),
    "nvidia.com/gpu": st.integers(0, 8).map(str),
    "example.com/credits": st.integers(0, 100).map(str),
}
amounts = st.fixed_dictionaries({}, optional=QUANTITIES)


@st.composite
def containers(draw: st.DrawFn, *, sidecar_allowed: bool = False) -> dict[str, Any]:
    resources = {"requests": draw(amounts), "limits": draw(amounts)}
    container: dict[str, Any] = {"name": "c", "resources": resources}
    if sidecar_allowed and draw(st.booleans()):
        container["restartPolicy"] = "Always"
    return container


specs = st.fixed_dictionaries(
    {"containers": st.lists(containers(), min_size=1, max_size=3)},
    optional={
        "initContainers": st.lists(containers(sidecar_allowed=True), max_size=4),
        "overhead": amounts,
    },
)


@given(specs)
def test_the_kubelet_and_the_scheduler_count_the_same_requests(spec: dict[str, Any]) -> None:
    theirs = {r: v for r, v in scheduler.effective_requests(spec).items() if v}
    ours = {r: v for r, v in kubelet.effective_requests(spec).items() if v}
    assert ours == theirs


def test_a_sidecar_runs_beside_the_init_containers_after_it() -> None:
    spec = {
        "initContainers": [
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "warm", "resources": {"requests": {"cpu": "3"}}},
        ],
        "containers": [{"name": "main", "resources": {"limits": {"cpu": "2"}}}],
        "overhead": {"cpu": "250m"},
    }
    assert float(kubelet.effective_requests(spec)["cpu"]) == 4.25  # max(1 + 3, 1 + 2) + 0.25
