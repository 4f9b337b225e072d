"""The kubelets on a fake clock: pods bound to the spec's nodes start, run for their duration and
succeed; admission failures carry the kubelet's reasons; deleted and evicted pods stop after
their grace period; GPUs are assigned as a node really assigns them (device plugin, shares, MIG,
DRA); hardware changes show in the node's allocatable."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client, watch

from sim.kubernetes.kubelet import DURATION, UTILIZATION
from sim.kubernetes.launch import SimulatedCluster
from tests.sim.kubernetes.helpers import Clock, client_for
from tests.sim.kubernetes.running import H100, MIG, api, limited, run, start


def timed(seconds: float, **extra: str) -> dict[str, Any]:
    return {"annotations": {DURATION: str(seconds), **extra}}


def test_a_bound_pod_starts_runs_its_duration_and_succeeds(
    sim: SimulatedCluster, clock: Clock
) -> None:
    core = run(sim, "train", H100, gpus=4, metadata=timed(600))
    assert sim.run_once().started == 1
    running = core.read_namespaced_pod("train", "ml-team")
    assert running.status.phase == "Running"
    assert running.status.start_time.isoformat() == "2026-01-05T09:00:00+00:00"
    assert {c.type for c in running.status.conditions if c.status == "True"} == {
        "PodScheduled",
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
    }
    (container,) = running.status.container_statuses
    assert container.ready and container.state.running is not None and container.restart_count == 0
    assert sim.kubelets.assignments() == {H100: {"ml-team/train": (0, 1, 2, 3)}}

    clock.advance(599)
    assert sim.run_once().finished == 0
    clock.advance(2)
    assert sim.run_once().finished == 1
    done = core.read_namespaced_pod("train", "ml-team")
    assert done.status.phase == "Succeeded"
    assert done.status.container_statuses[0].state.terminated.exit_code == 0
    assert sim.kubelets.assignments() == {}


def test_a_pod_that_does_not_fit_the_node_fails_with_the_kubelets_reason(
    sim: SimulatedCluster,
) -> None:
    core = run(sim, "first", H100, gpus=5)
    run(sim, "second", H100, gpus=5)
    run(
        sim,
        "hungry",
        H100,
        containers=[{"name": "main", "image": "x", "resources": {"requests": {"cpu": "300"}}}],
    )
    report = sim.run_once()
    assert (report.started, report.rejected) == (1, 2)
    second = core.read_namespaced_pod("second", "ml-team").status
    assert (second.phase, second.reason) == ("Failed", "OutOfnvidia.com/gpu")
    assert second.message == (
        "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 5, "
        "used: 5, capacity: 8"
    )
    assert core.read_namespaced_pod("hungry", "ml-team").status.reason == "OutOfcpu"


@pytest.mark.parametrize(("honour", "expected"), [(False, (0, 1)), (True, (4, 5))])
def test_the_device_plugin_picks_its_own_gpus_unless_told_to_honour_gpuscheds(
    clock: Clock, honour: bool, expected: tuple[int, ...]
) -> None:
    sim = start(clock, honour_gpu_ids=honour)
    try:
        run(sim, "p", H100, gpus=2, metadata={"annotations": {"gpusched.io/gpu-ids": "4,5"}})
        sim.run_once()
        assert sim.kubelets.assignments()[H100]["ml-team/p"] == expected
    finally:
        sim.close()


def test_a_deleted_pod_stops_after_its_grace_period_and_reports_failed(
    sim: SimulatedCluster, clock: Clock
) -> None:
    core = run(sim, "serve", H100, gpus=1)
    sim.run_once()
    version = core.read_namespaced_pod("serve", "ml-team").metadata.resource_version
    core.delete_namespaced_pod("serve", "ml-team")  # 30 s grace by default
    clock.advance(29)
    sim.run_once()
    terminating = core.read_namespaced_pod("serve", "ml-team")
    assert terminating.status.phase == "Running" and terminating.metadata.deletion_timestamp
    assert sim.kubelets.assignments() == {H100: {"ml-team/serve": (0,)}}  # held until gone
    clock.advance(2)
    assert sim.run_once().terminated == 1
    assert core.list_namespaced_pod("ml-team").items == []
    assert sim.kubelets.assignments() == {}
    stream = watch.Watch().stream(
        core.list_namespaced_pod, "ml-team", resource_version=version, timeout_seconds=1
    )
    seen = [(e["type"], e["object"].status.phase) for e in stream]
    assert seen[-2:] == [("MODIFIED", "Failed"), ("DELETED", "Failed")]


def test_children_of_a_deleted_parent_are_stopped_by_the_kubelet(
    sim: SimulatedCluster, clock: Clock
) -> None:
    core = api(sim)
    parent = core.create_namespaced_config_map("ml-team", {"metadata": {"name": "job"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "job", "uid": parent.metadata.uid}
    for name in ("w0", "w1"):
        run(sim, name, H100, gpus=2, metadata={"ownerReferences": [ref]})
    sim.run_once()
    core.delete_namespaced_config_map("job", "ml-team")
    clock.advance(31)
    assert sim.run_once().terminated == 2
    assert core.list_namespaced_pod("ml-team").items == []


def run_share(sim: SimulatedCluster, name: str, *, duration_s: int) -> None:
    """A pod holding 600 milli of GPU 3 of the H100 node, 90% busy."""
    annotations = {
        DURATION: str(duration_s),
        UTILIZATION: json.dumps({"kind": "constant", "mean": 0.9, "jitter": 0}),
        "gpusched.io/gpu-ids": "3",
        "gpusched.io/gpu-share-milli": "600",
    }
    limits = {"gpusched.io/gpu-milli": "600"}
    run(sim, name, H100, metadata={"annotations": annotations}, containers=limited(limits))


def test_gpu_shares_sit_on_the_annotated_gpu_and_slow_each_other_when_over_subscribed(
    sim: SimulatedCluster, clock: Clock
) -> None:
    for name in ("a", "b"):
        run_share(sim, name, duration_s=100)
    sim.run_once()
    assert sim.kubelets.assignments()[H100] == {"ml-team/a": (3,), "ml-team/b": (3,)}
    clock.advance(100)
    report = sim.run_once()  # both wanted 1.08 of GPU 3 for 100 s: each lost 7.4 s
    assert report.slowed == 2 and report.finished == 0
    clock.advance(9)
    assert sim.run_once().finished == 2


def test_a_pod_starting_beside_a_terminating_share_is_not_charged_for_the_time_before_it(
    sim: SimulatedCluster, clock: Clock
) -> None:
    """A share evicted from a GPU stops after its grace period, before the pod bound to its GPU
    in the meantime starts at the next step: the two never ran together."""
    run_share(sim, "lent", duration_s=600)
    sim.run_once()
    api(sim).delete_namespaced_pod("lent", "ml-team")  # gone within its 30 s grace
    run_share(sim, "online", duration_s=600)
    clock.advance(60)
    report = sim.run_once()
    assert (report.started, report.terminated, report.slowed) == (1, 1, 0)
    clock.advance(60)
    assert sim.run_once().slowed == 0
    assert [run.lost_s for run in sim.kubelets.running()] == [0.0]


def test_mig_pods_get_instances_of_their_profile(sim: SimulatedCluster) -> None:
    limits = {"nvidia.com/mig-1g.10gb": "3"}
    run(
        sim,
        "infer",
        MIG,
        containers=limited(limits),
    )
    sim.run_once()
    holding = sim.kubelets.holdings(MIG)["ml-team/infer"]
    layout = sim.kubelets.devices(MIG).gpus
    assert len(holding.mig) == 3
    assert all(layout[gpu].mig_layout[slot] == "1g.10gb" for gpu, slot in holding.mig)
    assert holding.mig == ((0, 2), (0, 3), (1, 2))  # lowest (GPU, slot) first


def test_a_dra_pod_waits_for_its_claim_then_gets_exactly_its_devices(clock: Clock) -> None:
    sim = start(clock, dra=True)
    try:
        resource = client_for(client.ResourceV1Api, sim.kube)
        claim = {
            "metadata": {"name": "four"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpus",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4},
                        }
                    ]
                }
            },
        }
        resource.create_namespaced_resource_claim("ml-team", claim)
        core = run(
            sim, "train", H100, resourceClaims=[{"name": "gpus", "resourceClaimName": "four"}]
        )
        assert sim.run_once().waiting == 1
        assert sim.run_once().waiting == 1
        warnings = client_for(client.EventsV1Api, sim.kube).list_namespaced_event("ml-team").items
        assert [(e.reason, e.type) for e in warnings] == [
            ("FailedPrepareDynamicResources", "Warning")
        ]

        uid = core.read_namespaced_pod("train", "ml-team").metadata.uid
        results = [
            {"request": "gpus", "driver": "gpu.nvidia.com", "pool": H100, "device": f"gpu-{i}"}
            for i in (2, 3, 4, 5)
        ]
        resource.patch_namespaced_resource_claim_status(
            "four",
            "ml-team",
            {
                "status": {
                    "allocation": {"devices": {"results": results}},
                    "reservedFor": [{"resource": "pods", "name": "train", "uid": uid}],
                }
            },
        )
        assert sim.run_once().started == 1
        assert sim.kubelets.assignments() == {H100: {"ml-team/train": (2, 3, 4, 5)}}
    finally:
        sim.close()


def test_hardware_changes_show_as_the_device_plugin_reports_them(sim: SimulatedCluster) -> None:
    core = api(sim)

    def gpus() -> tuple[str, str]:
        status = core.read_node(H100).status
        return status.allocatable["nvidia.com/gpu"], status.capacity["nvidia.com/gpu"]

    sim.hardware.set_gpu_health(H100, 7, healthy=False)
    assert gpus() == ("7", "8")
    run(sim, "whole-node", H100, gpus=8)
    sim.run_once()
    assert core.read_namespaced_pod("whole-node", "ml-team").status.reason == "OutOfnvidia.com/gpu"
    sim.hardware.remove_gpu(H100, 6)
    assert gpus() == ("6", "7")
    assert sim.hardware.add_gpus(H100, 2) == [8, 9]
    assert gpus() == ("8", "9")
    sim.hardware.set_cpu(H100, 64_000)
    assert core.read_node(H100).status.allocatable["cpu"] == "64"


def test_a_dra_nodes_resource_slice_follows_its_healthy_gpus(clock: Clock) -> None:
    sim = start(clock, dra=True)
    try:
        resource = client_for(client.ResourceV1Api, sim.kube)
        before = resource.list_resource_slice(field_selector=f"spec.nodeName={H100}").items[0]
        sim.hardware.set_gpu_health(H100, 0, healthy=False)
        after = resource.list_resource_slice(field_selector=f"spec.nodeName={H100}").items[0]
        assert [d.name for d in after.spec.devices] == [f"gpu-{i}" for i in range(1, 8)]
        assert after.spec.pool.generation == before.spec.pool.generation + 1
    finally:
        sim.close()


def test_a_malformed_simulation_annotation_is_reported_and_ignored(
    sim: SimulatedCluster, clock: Clock
) -> None:
    core = run(sim, "odd", H100, metadata={"annotations": {DURATION: "soon", UTILIZATION: "{"}})
    sim.run_once()
    events = client_for(client.EventsV1Api, sim.kube).list_namespaced_event("ml-team").items
    assert {e.reason for e in events} == {"InvalidSimulationAnnotation"} and len(events) == 1
    clock.advance(86_400)
    sim.run_once()
    assert core.read_namespaced_pod("odd", "ml-team").status.phase == "Running"  # until deleted
