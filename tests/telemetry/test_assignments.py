"""What pods really hold against what gpusched recorded: the simulated kubelet's classic device
plugin picks its own GPUs (lowest free first), dcgm-exporter labels them with the pods, and the
ingester detects the mismatch, counts it and corrects the record; later placements plan on what
is really free."""

from __future__ import annotations

from collections.abc import Iterator
from io import StringIO

import pytest
from django.db import IntegrityError
from django.template import Context, Template
from prometheus_client import generate_latest

from scheduling.models import Allocation, Event
from sim.kubernetes.launch import SimulatedCluster
from sim.metrics_server import serve_exposition
from sim.spec import parse_spec
from telemetry import metrics
from telemetry.dcgm import GpuKey, GpuSample, PodRef
from telemetry.holders import observed_from_samples
from telemetry.management.commands.ingesttelemetry import Command
from telemetry.models import GpuLatest
from telemetry.sources import ScrapeSource
from tests.kube import objects
from tests.kube.helpers import gpusched_cycle
from tests.sim.kubernetes.helpers import Clock as SimClock

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NS = "ml-team"
NODE = "h100-0000"


@pytest.fixture
def sim() -> Iterator[SimulatedCluster]:
    spec = parse_spec({"nodePools": [{"name": "h100", "count": 1, "topology": "dgx-h100"}]})
    found = SimulatedCluster.from_spec(spec, clock=SimClock(), watch_linger_s=0.05).start()
    found.kube.add_namespace(NS)
    yield found
    found.close()


def recorded(name: str) -> list[int]:
    (row,) = Allocation.objects.filter(pod__kube__name=name, active=True)
    return sorted(row.gpus.filter(active=True).values_list("gpu__index", flat=True))


def mismatches_counted() -> float:
    text = generate_latest(metrics.registry).decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("gpusched_gpu_assignment_mismatches_total{")
    )


def test_a_device_plugin_choice_is_detected_from_dcgm_labels_counted_and_corrected(sim) -> None:
    # A pod bound by another scheduler that wrote GPUs 4,5 as its choice: the device plugin
    # gives it the lowest free GPUs, 0 and 1.
    other = objects.pod("other", scheduler="default-scheduler", gpus=2, node_name=NODE)
    other["metadata"]["annotations"] = {"gpusched.io/gpu-ids": "4,5"}
    sim.kube.add_pod(other)
    cycle = gpusched_cycle(sim.kube)
    cycle.run_once()
    assert recorded("other") == [4, 5]
    sim.run_once()
    assert sim.kubelets.assignments()[NODE][f"{NS}/other"] == (0, 1)

    server = serve_exposition(sim.exporter.render, "127.0.0.1", 0)
    try:
        ingest = Command(stdout=StringIO(), stderr=StringIO())
        ingest.source = ScrapeSource([f"http://127.0.0.1:{server.server_port}/metrics"])
        before = mismatches_counted()
        report = ingest.run_once()
        assert report.ok and report.assignment_mismatches == 1 and report.assignments_corrected == 1
        metrics.record_cycle(report)
        assert mismatches_counted() == before + 1
        assert recorded("other") == [0, 1]  # what the pod holds is the truth
        (event,) = Event.objects.filter(type="allocation.gpus_observed")
        assert event.payload["recorded"] == [4, 5] and event.payload["observed"] == [0, 1]
        assert event.payload["source"] == "dcgm"

        # Later placements plan on what is really free: a 2-GPU pod of ours does not get 0,1,
        # and what gpusched chooses is lowest-free-first here, so the kubelet agrees.
        sim.kube.add_pod(objects.pod("ours", scheduler="gpusched", gpus=2))
        cycle.run_once()
        assert not {0, 1} & set(recorded("ours"))
        again = ingest.run_once()
        assert again.assignment_mismatches == 0  # corrected: not counted again
    finally:
        server.shutdown()
        server.server_close()

    # The Node page's marker names the correction.
    html = Template("{% load gpu_assignments %}{% gpu_mismatches name %}").render(
        Context({"name": NODE})
    )
    assert 'id="gpu-mismatches"' in html and "corrected" in html
    assert "GPUs 4,5 → 0,1" in html and "other" in html


def test_pods_are_read_from_either_sources_labels() -> None:
    """The scrape's `pod`/`namespace` and Prometheus' relabelled `exported_pod` (telemetry.dcgm
    pod_of) name the same holder; MIG instances and idle GPUs are left out."""
    pod = PodRef(NS, "train", "main")
    samples = [
        GpuSample(GpuKey(NODE, 2, ""), "GPU-2", pod=pod),
        GpuSample(GpuKey(NODE, 3, ""), "GPU-3", pod=pod),
        GpuSample(GpuKey(NODE, 4, "1"), "GPU-4", pod=pod),
        GpuSample(GpuKey(NODE, 5, ""), "GPU-5"),
    ]
    assert observed_from_samples(samples) == {(NODE, NS, "train"): (2, 3)}


def test_a_correction_the_database_refuses_is_reported_and_the_cycle_goes_on(
    sim, monkeypatch
) -> None:
    other = objects.pod("other", scheduler="default-scheduler", gpus=2, node_name=NODE)
    other["metadata"]["annotations"] = {"gpusched.io/gpu-ids": "4,5"}
    sim.kube.add_pod(other)
    gpusched_cycle(sim.kube).run_once()
    sim.run_once()

    def refuse(**_: object) -> None:
        raise IntegrityError("CHECK constraint failed: gpu_not_overcommitted")

    monkeypatch.setattr("scheduling.services.observed.gpus_observe", refuse)
    server = serve_exposition(sim.exporter.render, "127.0.0.1", 0)
    try:
        ingest = Command(stdout=StringIO(), stderr=StringIO())
        ingest.source = ScrapeSource([f"http://127.0.0.1:{server.server_port}/metrics"])
        report = ingest.run_once()
    finally:
        server.shutdown()
        server.server_close()
    assert report.ok and report.assignment_mismatches == 1 and report.assignments_corrected == 0
    assert recorded("other") == [4, 5]  # left as recorded, retried at the next scrape
    assert GpuLatest.objects.filter(node=NODE).exists()  # the samples of the cycle are kept
