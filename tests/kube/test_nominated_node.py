"""A node being emptied for a preemptor is held for it on the Kubernetes side, across cycles: the
evicted pods stay on the node until the kubelet has killed them, and meanwhile neither new
lower-priority pods nor the evicted ones, made again, are placed there, even in a cycle the
preemptor sits out (its backoff), as kube-scheduler's nominator counts a nominated pod on its
node for pods of lower or equal priority (issue 37 item 2: the over-request run's 8-GPU pods
waited for hours while research sweeps refilled the node emptied for them). The database side's
test of the same: tests/scheduling/worker/test_nominated_node.py."""

from __future__ import annotations

import pytest

from bench.experiments.worlds import run_cycles
from kube.api import KubeApi
from kube.side import kubernetes_cycle
from scheduling.core.scheduler import Framework
from scheduling.core.types import ServiceClass
from scheduling.models import Pod, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import Clock
from tests.scheduling import factories
from tests.support.held_nodes import assert_held_for, node_of

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NS = "research"
SWEEPS = 7  # one GPU each: the 8-GPU pod must evict them all


def request_only(fake: SimulatedKubernetes, clock: Clock) -> SchedulingCycle:
    """The over-request experiment's request-only policy (the `topology` profile)."""
    api = KubeApi(fake.api_client(), reporting_instance="gpusched-test")
    return kubernetes_cycle(
        api,
        Framework(load_profile("topology")),
        None,
        identity="gpusched-test",
        watch_timeout_s=5,
        clock=clock.now,
        monotonic=clock.monotonic,
    )


def sweep(name: str) -> Workload:
    return factories.workload(
        factories.tenant(NS), name, gpus=1, service_class=ServiceClass.OPPORTUNISTIC
    )


def test_a_node_emptied_for_a_nominated_pod_is_not_refilled_by_lower_priority_pods(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_namespace(NS)
    clock = Clock()
    sched = request_only(fake, clock)
    sweeps = [sweep(f"sweep-{k}") for k in range(SWEEPS)]
    run_cycles(sched)  # the experiment's step: cycles until one leaves nothing to do
    assert [node_of(w) for w in sweeps] == ["gpu-a"] * SWEEPS

    clock.advance(60)
    whole = factories.workload(factories.tenant(NS), "whole-server", gpus=8, priority=100)
    run_cycles(sched)
    (preemptor,) = whole.pods.all()
    assert preemptor.nominated_node == "gpu-a"
    victims = [p for p in fake.objects("pods", NS) if p["metadata"].get("deletionTimestamp")]
    assert len(victims) == SWEEPS  # terminating: they hold their GPUs until they are gone
    assert Pod.objects.filter(phase=Pod.Phase.TERMINATING).count() == SWEEPS

    # A new sweep arrives in the same simulated minute: its pod is made in one cycle and tried
    # in the next, which the preemptor sits out (its backoff). The GPU left free on gpu-a is
    # not its to take.
    late = sweep("late")
    run_cycles(sched)
    assert node_of(late) == ""

    # The kubelet has killed the victims: the sweeps come back as new pods, the preemptor gets
    # the node, and none of them is placed there meanwhile or evicted twice.
    for victim in victims:
        fake.delete_pod(NS, victim["metadata"]["name"])
    for _ in range(3):
        clock.advance(60)
        run_cycles(sched)
    assert_held_for(whole, "gpu-a", sweeps, late)
    made_again = [p for p in fake.objects("pods", NS) if p["metadata"]["name"].startswith("sweep")]
    assert len(made_again) == SWEEPS and not any(p["spec"].get("nodeName") for p in made_again)
