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
from tests.scheduling import factories
from tests.scheduling.core.strategies import RESOURCES

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
