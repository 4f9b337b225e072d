"""A Pod row's resources and back (scheduling/pod_resources.py), through the product's writes and
reads: the submit service, the scheduler's snapshot read, the page queries' values_list."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from scheduling import pod_resources, services
from scheduling.core.types import Resources
from scheduling.models import Pod, Workload
from scheduling.pod_template import PodTemplate
from scheduling.worker.cluster_state import pod_request
from tests.scheduling import factories
from tests.scheduling.core.strategies import RESOURCES

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
# Each example runs inside the test's one transaction (the database fixture is the test's).
IN_ONE_TRANSACTION = settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@IN_ONE_TRANSACTION
@given(RESOURCES)
def test_resources_to_a_row_and_back_is_the_same(resources: Resources) -> None:
    assert pod_resources.resources_of(Pod(**pod_resources.row_fields(resources))) == resources


@IN_ONE_TRANSACTION
@given(RESOURCES)
def test_a_submitted_pod_is_stored_and_read_back_with_its_resources(
    resources: Resources,
) -> None:
    Workload.objects.all().delete()
    template = PodTemplate(resources=resources)
    services.workload_submit(
        tenant=factories.tenant(),
        name="w",
        pod_sets=[services.PodSetSpec(name="main", count=1, template=template)],
    )
    pod = Pod.objects.select_related("workload__tenant").get()
    assert pod_resources.resources_of(pod) == resources
    assert pod_request(pod).resources == resources
    (values,) = Pod.objects.values_list(*pod_resources.COLUMNS)
    assert pod_resources.from_values(values) == resources
