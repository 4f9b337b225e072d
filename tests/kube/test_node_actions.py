"""Admins' cordon, uncordon and drain of a node the Kubernetes cluster manages, through the REST
API and the dashboard, carried out by the cycle on the simulated Kubernetes API with the official
client (scheduling.worker.node_actions): they show on the Node and Pod objects within one cycle,
answer with what the cluster said (429 per pod a PodDisruptionBudget keeps), a drained pod is
evicted and never bound to that node again, and a cordon made with the client shows on the page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from kubernetes import client as k8s

from api import services as api_services
from scheduling.models import Node, Pod
from scheduling.worker.cycle import SchedulingCycle
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.api.conftest import client_for
from tests.kube import objects
from tests.kube.helpers import gpusched_cycle
from tests.kube.test_side import NS, node_of, pod, quota

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


@pytest.fixture
def answer_later(settings: Any) -> None:
    """Requests do not wait for the cycle (it runs in the test, after them): they answer 202."""
    settings.NODE_ACTION_WAIT_S = 0


@pytest.fixture
def admin_api(db: None) -> Any:
    user = User.objects.create_user("admin", password="pw", is_staff=True)
    return client_for(api_services.token_create(user=user)[1])


def _cluster(fake: SimulatedKubernetes) -> SchedulingCycle:
    """Two nodes, two 2-GPU pods of ours bound to gpu-a and running."""
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    quota(fake, 16)
    sched = gpusched_cycle(fake)
    fake.add_pod(pod("train-0", gpus=2, node_selector={"kubernetes.io/hostname": "gpu-a"}))
    fake.add_pod(pod("train-1", gpus=2, node_selector={"kubernetes.io/hostname": "gpu-a"}))
    sched.run_once()
    for name in ("train-0", "train-1"):
        assert node_of(fake, name) == "gpu-a"
        fake.update_pod(NS, name, lambda p: p["status"].update(phase="Running"))
    sched.run_once()
    return sched


def _unschedulable(fake: SimulatedKubernetes, node: str) -> bool:
    spec = k8s.CoreV1Api(fake.api_client()).read_node(node).spec
    return spec is not None and bool(spec.unschedulable)


def test_cordon_and_uncordon_through_the_api_patch_the_node(fake, admin_api, answer_later) -> None:
    sched = _cluster(fake)
    asked = admin_api.post("/api/v1/admin/nodes/gpu-a/cordon")
    assert asked.status_code == 202, asked.json()
    assert asked.json()["answer"] == {} and not _unschedulable(fake, "gpu-a")
    sched.run_once()
    assert _unschedulable(fake, "gpu-a")
    answered = admin_api.get(asked["Location"])
    assert answered.status_code == 200
    assert answered.json()["answer"]["node"] == {
        "status": 200,
        "unschedulable": True,
        "message": "",
    }
    assert admin_api.get("/api/v1/admin/nodes/gpu-a").json()["cordoned"] is True
    sched.run_once()  # the Node's watch event agrees: the cordon stays
    assert Node.objects.get(name="gpu-a").cordoned

    admin_api.post("/api/v1/admin/nodes/gpu-a/uncordon")
    sched.run_once()
    assert not _unschedulable(fake, "gpu-a")
    sched.run_once()
    assert admin_api.get("/api/v1/admin/nodes/gpu-a").json()["cordoned"] is False


def test_a_cordon_made_with_the_client_shows_on_the_page(fake) -> None:
    sched = _cluster(fake)
    k8s.CoreV1Api(fake.api_client()).patch_node("gpu-b", {"spec": {"unschedulable": True}})
    sched.run_once()
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    page = browser.get("/nodes/gpu-b/").content.decode()
    assert 'id="uncordon"' in page and 'id="cordon"' not in page


def test_drain_through_the_api_evicts_the_pods_which_never_come_back_there(
    fake, admin_api, answer_later
) -> None:
    sched = _cluster(fake)
    asked = admin_api.post("/api/v1/admin/nodes/gpu-a/drain")
    assert asked.status_code == 202
    sched.run_once()
    answer = admin_api.get(asked["Location"]).json()["answer"]
    assert answer["node"]["unschedulable"] is True and _unschedulable(fake, "gpu-a")
    assert sorted((p["pod"], p["status"], p["evicted"]) for p in answer["pods"]) == [
        (f"{NS}/train-0", "201", True),
        (f"{NS}/train-1", "201", True),
    ]
    for name in ("train-0", "train-1"):
        gone = fake.pod(NS, name)
        assert gone is None or gone["metadata"].get("deletionTimestamp"), name
    for _ in range(3):  # resyncs never take the evicted pods back as bound to gpu-a
        sched.run_once()
        phases = set(Pod.objects.values_list("phase", flat=True))
        assert phases <= {Pod.Phase.TERMINATING, Pod.Phase.PENDING}, phases


def test_a_disruption_budget_keeps_its_pods_and_each_refusal_is_reported(
    fake, admin_api, answer_later
) -> None:
    sched = _cluster(fake)
    for name in ("train-0", "train-1"):
        fake.update_pod(
            NS, name, lambda p: p["metadata"].setdefault("labels", {}).update(app="trainer")
        )
    fake.put(
        "poddisruptionbudgets",
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "trainers", "namespace": NS},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "trainer"}}},
        },
    )
    asked = admin_api.post("/api/v1/admin/nodes/gpu-a/drain")
    sched.run_once()
    pods = admin_api.get(asked["Location"]).json()["answer"]["pods"]
    assert {p["pod"] for p in pods} == {f"{NS}/train-0", f"{NS}/train-1"}
    assert all(p["status"].startswith("429") and not p["evicted"] for p in pods), pods
    assert all("disruption budget" in p["status"] for p in pods)
    sched.run_once()
    for name in ("train-0", "train-1"):
        assert node_of(fake, name) == "gpu-a"
        assert not fake.pod(NS, name)["metadata"].get("deletionTimestamp")
    assert Pod.objects.filter(phase__in=Pod.PLACED_PHASES).count() == 2


def test_cordon_and_drain_from_the_dashboard_reach_the_node(fake, answer_later) -> None:
    sched = _cluster(fake)
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    asked = browser.post("/nodes/gpu-b/cordon/", {"cordoned": "1"}, follow=True)
    assert "asked of the cluster" in asked.content.decode()
    sched.run_once()
    assert _unschedulable(fake, "gpu-b")
    assert 'id="uncordon"' in browser.get("/nodes/gpu-b/").content.decode()

    browser.post("/nodes/gpu-a/drain/", follow=True)
    sched.run_once()
    assert _unschedulable(fake, "gpu-a")
    for name in ("train-0", "train-1"):
        gone = fake.pod(NS, name)
        assert gone is None or gone["metadata"].get("deletionTimestamp"), name


def test_a_cancel_from_the_dashboard_deletes_the_pods_in_the_cluster(fake) -> None:
    sched = _cluster(fake)
    staff = User.objects.create_user("staff", password="pw", is_staff=True)
    browser = Client()
    browser.force_login(staff)
    workload = Pod.objects.get(name="train-0").workload
    assert browser.post(f"/workloads/{workload.uid}/cancel/").status_code == 302
    sched.run_once()
    gone = fake.pod(NS, "train-0")
    assert gone is None or gone["metadata"].get("deletionTimestamp")
    assert node_of(fake, "train-1") == "gpu-a" and not fake.pod(NS, "train-1")["metadata"].get(
        "deletionTimestamp"
    )  # another workload's pod stays
