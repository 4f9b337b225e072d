"""Admin actions from the dashboard: POST only, staff only, CSRF-checked, done through the REST
API's services, each with its audit event in the outbox beside the change's own events."""

from __future__ import annotations

import pytest
from django.test import Client

from api.services import tenant_onboard
from scheduling import events
from scheduling.core.scheduler import Framework
from scheduling.models import ClusterQueue, Event, Node, Workload
from scheduling.profile_files import load_profile
from scheduling.worker.database_side import database_cycle
from tests.dashboard.conftest import make_admin
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db]


def admin_client(*, csrf: bool = False, staff: bool = True) -> Client:
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(make_admin("admin" if staff else "viewer", staff=staff))
    return client


def audit() -> list[events.AdminActed]:
    rows = Event.objects.filter(type=events.AdminActed.TYPE).order_by("id")
    return [events.read(row.type, row.payload) for row in rows]  # type: ignore[misc]


def test_cordon_and_uncordon_are_audited() -> None:
    (node,) = factories.nodes(1)
    client = admin_client()
    response = client.post(f"/nodes/{node.name}/cordon/", {"cordoned": "1"})
    assert response.status_code == 302 and response["Location"] == f"/nodes/{node.name}/"
    assert Node.objects.get(pk=node.pk).cordoned
    client.post(f"/nodes/{node.name}/cordon/", {"cordoned": "0"})
    assert not Node.objects.get(pk=node.pk).cordoned
    assert [(a.actor, a.action, a.target) for a in audit()] == [
        ("admin", "node.cordon", node.name),
        ("admin", "node.uncordon", node.name),
    ]
    page = client.get(f"/nodes/{node.name}/").content.decode()
    assert 'id="cordon"' in page and "data-confirm" in page


def test_drain_requeues_what_runs_there() -> None:
    (node,) = factories.nodes(1)
    factories.workload(factories.tenant("vision"), "train", gpus=4)
    database_cycle(Framework(load_profile("topology")), identity="actions").run_once()
    response = admin_client().post(f"/nodes/{node.name}/drain/", {"next": "/"})
    assert response.status_code == 302 and response["Location"] == "/"
    assert Node.objects.get(pk=node.pk).cordoned
    assert not Workload.objects.get().pods.filter(phase__in=["Bound", "Running"]).exists()
    (record,) = audit()
    assert (record.action, record.detail) == ("node.drain", {"evicted": ["vision/train"]})


def test_cancel_a_workload() -> None:
    workload = factories.workload(factories.tenant("nlp"), "big", gpus=16)
    client = admin_client()
    assert client.post(f"/workloads/{workload.uid}/cancel/").status_code == 302
    assert Workload.objects.get().state == Workload.State.CANCELLED
    assert [(a.action, a.target) for a in audit()] == [("workload.cancel", "nlp/big")]
    # Cancelling twice is refused by the API's service: said, and nothing audited.
    client.post(f"/workloads/{workload.uid}/cancel/")
    assert len(audit()) == 1


def test_actions_need_post_staff_and_the_csrf_token() -> None:
    (node,) = factories.nodes(1)
    assert admin_client().get(f"/nodes/{node.name}/cordon/").status_code == 405
    assert admin_client(staff=False).post(f"/nodes/{node.name}/cordon/").status_code == 403
    assert admin_client(csrf=True).post(f"/nodes/{node.name}/cordon/").status_code == 403
    assert not Node.objects.get(pk=node.pk).cordoned and audit() == []


def onboarded(name: str, gpus: str) -> None:
    tenant_onboard(name=name, quota={"nvidia.com/gpu": gpus})


def nominal_gpus(queue: str) -> int:
    cq = ClusterQueue.objects.get(name=queue)
    return int(cq.resource_groups[0]["flavors"][0]["resources"][0]["nominalQuota"])


def flavor_of(queue: str) -> str:
    return str(ClusterQueue.objects.get(name=queue).resource_groups[0]["flavors"][0]["name"])


def gpu_field(queue: str, limit: str = "nominalQuota") -> str:
    return f"{flavor_of(queue)}/nvidia.com/gpu.{limit}"


def test_change_a_tenants_quota_then_back_to_the_form() -> None:
    onboarded("vision", "8")
    form = admin_client().get("/tenants/vision/quota/")
    assert form.status_code == 200
    assert f'name="{gpu_field("vision")}" value="8"' in form.content.decode()
    response = admin_client().post(
        "/tenants/vision/quota/", {"cluster_queue": "vision", gpu_field("vision"): "12"}
    )
    # POST-redirect-GET: the answer is a redirect to the form, so a reload does not post again.
    assert response.status_code == 302 and response["Location"] == "/tenants/vision/quota/"
    assert nominal_gpus("vision") == 12000
    (record,) = audit()
    assert (record.actor, record.action, record.target) == ("admin", "clusterqueue.quota", "vision")
    key = f"{flavor_of('vision')}/nvidia.com/gpu"
    assert record.detail["limits"] == {key: {"nominalQuota": {"from": "8", "to": "12"}}}


@pytest.mark.parametrize(("value", "problem"), [("twelve", "twelve"), ("-3", "negative"), ("", "")])
def test_a_bad_quota_is_a_400_with_the_problem_beside_its_field(value: str, problem: str) -> None:
    onboarded("vision", "8")
    field = gpu_field("vision")
    response = admin_client().post(
        "/tenants/vision/quota/", {"cluster_queue": "vision", field: value}
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert f'name="{field}" value="{value}" size="8"' in page
    assert 'aria-invalid="true"' in page and 'class="error" role="alert"' in page
    assert problem in page
    assert nominal_gpus("vision") == 8000 and audit() == []


def test_a_queue_the_tenant_does_not_feed_is_refused() -> None:
    onboarded("vision", "8")
    onboarded("nlp", "4")
    response = admin_client().post(
        "/tenants/vision/quota/", {"cluster_queue": "nlp", gpu_field("nlp"): "12"}
    )
    assert response.status_code == 400
    assert "no LocalQueue of tenant &#x27;vision&#x27; points at" in response.content.decode()
    assert nominal_gpus("nlp") == 4000 and audit() == []


def test_the_quota_change_needs_staff_and_the_csrf_token() -> None:
    onboarded("vision", "8")
    path = "/tenants/vision/quota/"
    form = {"cluster_queue": "vision", gpu_field("vision"): "12"}
    assert admin_client().put(path).status_code == 405
    assert admin_client(staff=False).post(path, form).status_code == 403
    assert admin_client(csrf=True).post(path, form).status_code == 403
    assert admin_client().post("/tenants/nobody/quota/", form).status_code == 404
    assert nominal_gpus("vision") == 8000 and audit() == []
