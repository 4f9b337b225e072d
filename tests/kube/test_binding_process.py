"""Bindings answered beside the scheduling cycle (scheduling.worker.cycle, kube.binder): sent from
the binding process as `runkube` sends them (kube.binding_process), and left in flight while the
next cycle runs, without the mirror taking an unanswered Binding for one that never went out."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

from kube.binding_process import Connection
from kube.models import KubePod
from scheduling.models import Allocation, Pod
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import gpusched_cycle as cycle
from tests.kube.helpers import side_of

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

WHOLE = {"gpusched.io/topology-policy": "none"}  # eight GPUs across both NUMA nodes


def pod_phase(name: str) -> str:
    return str(KubePod.objects.get(name=name).pod.phase)


def a_slow_binding(fake: SimulatedKubernetes, *, rival: bool = False) -> threading.Event:
    """Pods `a` and `b` of one GPU on one node; the API server answers a's Binding only once
    the event returned is set (a rival binds `a` first when `rival`)."""
    fake.add_node(objects.node("gpu-a"))
    for name in ("a", "b"):
        fake.add_pod(objects.pod(name, scheduler="gpusched", gpus=1))
    answer = threading.Event()

    def slow_api_server(namespace: str, name: str) -> None:
        if name == "a":
            if rival:
                fake.update_pod(namespace, name, lambda p: p["spec"].update(nodeName="gpu-a"))
            answer.wait(timeout=30)

    fake.on_binding = slow_api_server
    return answer


def test_the_binding_process_binds_and_a_refused_binding_goes_back_to_the_queue(
    fake: SimulatedKubernetes, tmp_path: Path
) -> None:
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        fake.add_node(objects.node(name))
    for name, node in (("train-0", "gpu-a"), ("contended", "gpu-b")):
        only = {"kubernetes.io/hostname": node}
        fake.add_pod(
            objects.pod(name, scheduler="gpusched", gpus=8, node_selector=only, annotations=WHOLE)
        )

    def rival_binds_first(namespace: str, name: str) -> None:
        if name == "contended":
            fake.on_binding = None
            fake.update_pod(namespace, name, lambda p: p["spec"].update(nodeName="gpu-c"))

    fake.on_binding = rival_binds_first
    # Connected as runkube connects: from the kubeconfig, read again by the child.
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig")
    sched = cycle(fake, binding_connection=Connection(kubeconfig=str(kubeconfig)))
    side = side_of(sched)
    try:
        report = sched.run_once()
        assert (report.bound, report.conflicts, report.requeued) == (1, 1, 1)
        assert fake.pod("ml-team", "train-0")["spec"]["nodeName"] == "gpu-a"
        scheduled = [e["regarding"]["name"] for e in fake.events if e["reason"] == "Scheduled"]
        assert scheduled == ["train-0"]  # and none for the refused Binding
        assert pod_phase("contended") == Pod.Phase.PENDING
        assert not Allocation.objects.filter(pod__kube__name="contended", active=True).exists()

        # The next cycle counts it where the rival put it.
        sched.run_once()
        assert pod_phase("contended") == Pod.Phase.BOUND
        held = Allocation.objects.get(pod__kube__name="contended", active=True)
        assert held.node.name == "gpu-c"
        assert side.binder.process is not None and side.binder.process.cpu_s() > 0
    finally:
        side.stop()
    assert side.binder.process is not None and side.binder.process.cpu_s() == 0.0  # stopped


def test_a_binding_in_flight_is_not_taken_for_one_that_never_went_out(
    fake: SimulatedKubernetes,
) -> None:
    answer = a_slow_binding(fake)
    sched = cycle(fake, batch_size=1)  # one pod a cycle: more is waiting after each
    side = side_of(sched)
    try:
        first = sched.run_once()
        assert first.more and first.bound == 0  # a's Binding still unanswered
        assert pod_phase("a") == Pod.Phase.BOUND  # committed and held meanwhile

        # A full pass sees `a` unbound in the cluster: not a bind that never went out while
        # its Binding is in flight.
        side.resync()
        second = sched.run_once()
        assert second.requeued == 0 and pod_phase("a") == Pod.Phase.BOUND
        assert fake.pod("ml-team", "a")["spec"].get("nodeName") is None
    finally:
        answer.set()
    while sched.run_once().more:
        pass
    assert [fake.pod("ml-team", n)["spec"].get("nodeName") for n in ("a", "b")] == ["gpu-a"] * 2
    assert [pod_phase(n) for n in ("a", "b")] == [Pod.Phase.BOUND] * 2
    assert Allocation.objects.filter(active=True).count() == 2
    assert not side.binder.in_flight


def test_a_binding_process_that_dies_is_replaced_and_its_pods_bound_again(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_pod(objects.pod("first", scheduler="gpusched", gpus=1))
    sched = cycle(fake, binding_connection=Connection(host=fake.url))
    side = side_of(sched)
    try:
        assert sched.run_once().bound == 1
        for child in multiprocessing.active_children():  # the binding process
            child.kill()
            child.join()
        fake.add_pod(objects.pod("second", scheduler="gpusched", gpus=1))
        reports = [sched.run_once() for _ in range(3)]
        assert sum(r.bound for r in reports) == 1
        assert fake.pod("ml-team", "second")["spec"]["nodeName"] == "gpu-a"
        assert pod_phase("second") == Pod.Phase.BOUND
    finally:
        side.stop()


def test_standing_down_answers_what_is_in_flight(fake: SimulatedKubernetes) -> None:
    answer = a_slow_binding(fake, rival=True)
    sched = cycle(fake, batch_size=1)
    assert sched.run_once().more  # a's Binding in flight when the command stops
    answer.set()
    sched.stand_down()
    assert not side_of(sched).binder.in_flight
    assert pod_phase("a") == Pod.Phase.PENDING  # refused (bound meanwhile): back in the queue
