"""A submitted workload's pods written into the cluster (kube/materialize.py) ask for what they
asked for: the manifest read back by the Kubernetes translation gives the same Resources."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from kube.materialize import parent_manifest, pod_manifest
from kube.translate import pod_info
from scheduling import services
from scheduling.core.resource_requests import REQUESTED
from scheduling.core.types import Resources
from scheduling.models import Pod, Workload
from scheduling.pod_template import PodTemplate
from sim.kubernetes.launch import SimulatedCluster
from sim.runs import simulations_record
from sim.spec import parse_spec
from sim.utilization import UtilizationProfile
from tests.kube.helpers import gpusched_cycle
from tests.scheduling import factories
from tests.scheduling.core.strategies import RESOURCES
from tests.sim.kubernetes.helpers import Clock as SimClock

pytestmark = [pytest.mark.django_db]


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(RESOURCES)
def test_a_materialized_pod_asks_the_cluster_for_its_resources(resources: Resources) -> None:
    Workload.objects.all().delete()
    workload = services.workload_submit(
        tenant=factories.tenant(),
        name="w",
        pod_sets=[services.PodSetSpec("main", 1, PodTemplate(resources=resources))],
    )
    pod = Pod.objects.select_related("workload__tenant").get()
    manifest = pod_manifest(
        pod, scheduler_name="gpusched", parent=parent_manifest(workload), image="busybox"
    )
    container = manifest["spec"]["containers"][0]["resources"]
    # Devices and extended resources through limits (Kubernetes wants a limit for them).
    assert all(r not in REQUESTED for r in container["limits"] or {})
    info = pod_info(manifest)
    assert info.error == "" and info.ask is not None
    assert info.ask.resources == resources


@pytest.mark.postgres
def test_a_submitted_pod_runs_on_the_simulated_kubelet_as_busy_as_its_utilization_profile() -> None:
    """The Pod row keeps the profile's field names (`period_s`); the kubelet reads the specs'
    (`periodSeconds`). Written as stored, the kubelet refused the annotation and ran every pod at
    its default profile (half busy), so DCGM, the tenants' usage ratios and reclaim saw another
    load than the database side's simulator on the same arrivals."""
    spec = parse_spec({"nodePools": [{"name": "a100", "count": 1, "topology": "dgx-a100"}]})
    clock = SimClock()
    sim = SimulatedCluster.from_spec(spec, clock=clock, watch_linger_s=0.05).start()
    try:
        sim.kube.add_namespace("ml-team")
        cycle = gpusched_cycle(sim.kube)
        cycle.run_once()  # nodes mirrored
        busy = UtilizationProfile(kind="bursty", mean=0.45, duty=0.5, period_s=600, jitter=0.0)
        workload = services.workload_submit(
            tenant=factories.tenant("ml-team"),
            name="train",
            pod_sets=[
                services.PodSetSpec(
                    "main",
                    1,
                    PodTemplate(
                        resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=1),
                    ),
                )
            ],
        )
        simulations_record(workload, duration_s=3600, utilization=busy.as_json())
        for _ in range(3):  # made, then bound
            cycle.run_once()
        sim.run_once()  # the kubelet starts it
        (run,) = sim.kubelets.running()
        assert run.profile == busy
        held = [s for s in sim.exporter.states() if s.pod == "train-main-0"]
        assert [s.gpu_util for s in held] == [90]  # busy half of each 10 minutes, at 0.45 / 0.5
        clock.advance(400)
        assert [s.gpu_util for s in sim.exporter.states() if s.pod == "train-main-0"] == [2]
        assert not [e for e in sim.kube.events if e["reason"] == "InvalidSimulationAnnotation"]
    finally:
        sim.close()
