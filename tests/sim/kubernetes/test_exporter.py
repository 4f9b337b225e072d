"""The simulated dcgm-exporter, parsed with telemetry.parsing as the ingester reads it: every GPU
of every node, Hostname = node, and the pod labels of the pods that really hold each GPU (the
kubelet's assignment, not the scheduler's annotation)."""

from __future__ import annotations

import json
import urllib.request

from sim.kubernetes.kubelet import UTILIZATION
from sim.kubernetes.launch import SimulatedCluster
from sim.metrics_server import serve_exposition
from telemetry.parsing import Sample, parse_exposition
from tests.sim.kubernetes.running import H100, MIG, limited, run


def samples(sim: SimulatedCluster, metric: str, node: str) -> list[Sample]:
    parsed, stats = parse_exposition(sim.exporter.render())
    assert stats.skipped == 0, stats.examples
    return [s for s in parsed if s.name == metric and s.labels.get("Hostname") == node]


def test_gpus_carry_the_labels_of_the_pods_that_really_hold_them(sim: SimulatedCluster) -> None:
    steady = json.dumps({"kind": "constant", "mean": 0.7, "jitter": 0})
    annotations = {UTILIZATION: steady, "gpusched.io/gpu-ids": "6,7"}  # a real kubelet ignores it
    run(sim, "train", H100, gpus=2, metadata={"annotations": annotations})
    sim.run_once()

    util = {s.labels["gpu"]: s for s in samples(sim, "DCGM_FI_DEV_GPU_UTIL", H100)}
    assert sorted(util) == [str(i) for i in range(8)]
    for gpu in ("0", "1"):
        labels = util[gpu].labels
        assert (labels["pod"], labels["namespace"], labels["container"]) == (
            "train",
            "ml-team",
            "main",
        )
        assert util[gpu].value == 70.0
    assert all("pod" not in util[g].labels and util[g].value == 0.0 for g in ("6", "7"))
    assert util["0"].labels["UUID"] == f"GPU-{H100}-0"


def test_mig_instances_and_unhealthy_or_removed_gpus(sim: SimulatedCluster) -> None:
    limits = {"nvidia.com/mig-3g.40gb": "1"}
    run(
        sim,
        "infer",
        MIG,
        containers=limited(limits),
    )
    sim.run_once()
    engine = samples(sim, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", MIG)
    assert len(engine) == 8 * 4  # every instance of every GPU
    held = [s for s in engine if "pod" in s.labels]
    assert [(s.labels["gpu"], s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"]) for s in held] == [
        ("0", "3g.40gb", "0")
    ]
    assert not samples(sim, "DCGM_FI_DEV_GPU_UTIL", MIG)  # not reported on MIG instances

    sim.hardware.set_gpu_health(H100, 2, healthy=False)
    sim.hardware.remove_gpu(H100, 5)
    xid = {s.labels["gpu"]: s.value for s in samples(sim, "DCGM_FI_DEV_XID_ERRORS", H100)}
    assert xid["2"] == 48.0 and "5" not in xid and len(xid) == 7


def test_the_exposition_is_served_on_metrics(sim: SimulatedCluster) -> None:
    server = serve_exposition(sim.exporter.render, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
            assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        parsed, _ = parse_exposition(text)
        assert {s.labels["Hostname"] for s in parsed} == {H100, MIG}
    finally:
        server.shutdown()
        server.server_close()
