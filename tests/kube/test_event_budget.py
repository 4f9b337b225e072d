"""Events are best effort and rate-limited as kube-scheduler's are (kube.api.EventBudget): over the
budget they are dropped and counted, never waited for, while every Binding still goes out."""

from __future__ import annotations

import pytest

from kube.api import EventBudget, KubeApi
from kube.side import kubernetes_cycle
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import Clock, framework

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_a_burst_of_bindings_beyond_the_event_budget_binds_every_pod_and_drops_the_surplus(
    fake: SimulatedKubernetes,
) -> None:
    clock = Clock()
    told: list[None] = []
    budget = EventBudget(1.0, 2, monotonic=clock.monotonic, on_drop=lambda: told.append(None))
    api = KubeApi(fake.api_client(), reporting_instance="gpusched-test", event_budget=budget)
    cycle = kubernetes_cycle(api, framework(), None, identity="gpusched-test", watch_timeout_s=5)
    fake.add_node(objects.node("gpu-a"))
    for k in range(4):
        fake.add_pod(objects.pod(f"p{k}", gpus=1))

    report = cycle.run_once()

    assert report.bound == 4 and len(fake.bindings) == 4  # Bindings are never limited
    scheduled = [e for e in fake.events if e["reason"] == "Scheduled"]
    assert len(scheduled) == 2 and budget.dropped == 2

    # A second later the bucket holds one event again.
    clock.advance(1.0)
    pod = fake.pod("ml-team", "p0")

    def scheduled_again(note: str) -> bool:
        return api.event(
            namespace="ml-team",
            pod_name="p0",
            pod_uid=pod["metadata"]["uid"],
            kind="Normal",
            reason="Scheduled",
            action="Binding",
            note=note,
            now=clock.now(),
        )

    assert scheduled_again("again")
    assert not scheduled_again("once more")
    assert len(fake.events) == 3 and budget.dropped == 3 == len(told)  # runkube's /metrics counter
