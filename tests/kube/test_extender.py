"""The kube-scheduler extender endpoints with kube-scheduler's extender v1 JSON (PascalCase, both
nodeCacheCapable modes), against the database mirror the secondary scheduler keeps; here through
the web process's routes (GPUSCHED_WEB_EXTENDER, bearer token), which are off by default and
admit no caller without the token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube import extender
from kube.api import KubeApi
from kube.models import KubePod
from scheduling.models import Allocation
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import framework, scheduler

pytestmark = [pytest.mark.django_db, pytest.mark.postgres, pytest.mark.urls("tests.kube.urls")]

TAINT = [{"key": "dedicated", "value": "inference", "effect": "NoSchedule"}]


TOKEN = "extender-test-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(autouse=True)
def web_extender(settings, tmp_path) -> None:
    token_file = tmp_path / "extender-token"
    token_file.write_text(f"{TOKEN}\n")
    settings.WEB_EXTENDER = True
    settings.EXTENDER_TOKEN_FILE = str(token_file)


@pytest.fixture
def cluster(fake: SimulatedKubernetes) -> Iterator[SimulatedKubernetes]:
    """gpu-a: 6 of 8 GPUs held by a pod the default scheduler placed; gpu-b: free; tainted: free
    but tainted. Mirrored into the database by one secondary-scheduler cycle."""
    for node in (
        objects.node("gpu-a"),
        objects.node("gpu-b"),
        objects.node("tainted", taints=TAINT),
    ):
        fake.add_node(node)
    fake.add_pod(objects.pod("busy", gpus=6, scheduler="default-scheduler", node_name="gpu-a"))
    scheduler(fake, lease=False).run_once()
    extender.install(
        extender.Extender(framework(), api=KubeApi(fake.api_client(), reporting_instance="web-0"))
    )
    yield fake
    extender.install(None)


def pod_json(
    name: str = "train-0",
    gpus: int = 4,
    policy: str = "single-numa-node",
    uid: str = "6f1c3e0a-5b8e-4a0e-9d7c-1f2e3d4c5b6a",
) -> dict[str, Any]:
    doc = objects.pod(
        name,
        gpus=gpus,
        scheduler="default-scheduler",
        annotations={"gpusched.io/topology-policy": policy},
    )
    if uid:
        doc["metadata"]["uid"] = uid
    return doc


def post(path: str, body: object) -> tuple[int, Any]:
    response = Client(headers=AUTH).post(
        path, data=json.dumps(body), content_type="application/json"
    )
    return response.status_code, response.json()


def test_filter_with_node_names_when_node_cache_capable(cluster: SimulatedKubernetes) -> None:
    status, reply = post(
        "/extender/filter",
        {"Pod": pod_json(), "Nodes": None, "NodeNames": ["gpu-a", "gpu-b", "tainted", "ghost"]},
    )
    assert status == 200
    assert set(reply) == {
        "Nodes",
        "NodeNames",
        "FailedNodes",
        "FailedAndUnresolvableNodes",
        "Error",
    }
    assert reply["Error"] == "" and reply["Nodes"] is None
    assert reply["NodeNames"] == ["gpu-b"]  # a subset of the request
    assert set(reply["FailedNodes"]) == {"gpu-a", "ghost"}
    assert reply["FailedNodes"]["ghost"] == "node is not known to gpusched yet"
    assert reply["FailedNodes"]["gpu-a"] == "Insufficient nvidia.com/gpu"
    assert set(reply["FailedAndUnresolvableNodes"]) == {"tainted"}
    assert reply["FailedAndUnresolvableNodes"]["tainted"] == "node(s) had untolerated taint"


def test_filter_with_full_nodes_when_not_node_cache_capable(cluster: SimulatedKubernetes) -> None:
    nodes = [objects.node("gpu-a"), objects.node("gpu-b"), objects.node("fresh")]
    status, reply = post(
        "/extender/filter",
        {"Pod": pod_json(gpus=2), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None},
    )
    assert status == 200 and reply["Error"] == "" and reply["NodeNames"] is None
    # The passing Node objects go back exactly as they came ("fresh" is unknown to the mirror and
    # judged from its Node object alone).
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["gpu-a", "gpu-b", "fresh"]
    assert reply["Nodes"]["items"][2] == nodes[2]

    status, reply = post(
        "/extender/filter",
        {"Pod": pod_json(gpus=4), "Nodes": {"metadata": {}, "items": nodes}, "NodeNames": None},
    )
    assert [n["metadata"]["name"] for n in reply["Nodes"]["items"]] == ["gpu-b", "fresh"]
    assert set(reply["FailedNodes"]) == {"gpu-a"}


def test_prioritize_scores_zero_to_ten_best_node_first_class(cluster: SimulatedKubernetes) -> None:
    status, reply = post(
        "/extender/prioritize",
        {
            "Pod": pod_json(gpus=1, policy="none"),
            "Nodes": None,
            "NodeNames": ["gpu-a", "gpu-b", "ghost"],
        },
    )
    assert status == 200
    assert [entry["Host"] for entry in reply] == ["gpu-a", "gpu-b", "ghost"]
    scores = {entry["Host"]: entry["Score"] for entry in reply}
    assert all(isinstance(v, int) and 0 <= v <= 10 for v in scores.values())
    assert max(scores.values()) == 10 and scores["ghost"] == 0


def test_prioritize_prefers_the_node_that_keeps_the_topology(cluster: SimulatedKubernetes) -> None:
    _, reply = post(
        "/extender/prioritize",
        {"Pod": pod_json(gpus=4), "Nodes": None, "NodeNames": ["gpu-b", "gpu-a"]},
    )
    scores = {entry["Host"]: entry["Score"] for entry in reply}
    assert scores == {"gpu-b": 10, "gpu-a": 0}  # gpu-a cannot hold it at all


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("{not json", "request body is not JSON"),
        ([], "ExtenderArgs must be a JSON object"),
        ({"Nodes": None, "NodeNames": ["gpu-a"]}, "ExtenderArgs.Pod must be a v1.Pod object"),
        ({"Pod": {"metadata": {"name": "p"}, "spec": {}}}, "ExtenderArgs needs Nodes or NodeNames"),
        (
            {"Pod": {"metadata": {"name": "p"}, "spec": {}}, "NodeNames": "gpu-a"},
            "must be a list of strings",
        ),
        (
            {
                "Pod": {
                    "metadata": {"name": "p"},
                    "spec": {
                        "containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]
                    },
                },
                "NodeNames": [],
            },
            "cpu: 'lots' is not a quantity",
        ),
        # Malformed Pods are the caller's error, not the extender being unavailable (a 503).
        (
            {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": "x"}}, "NodeNames": []},
            "ExtenderArgs.Pod is not a valid v1.Pod",
        ),
        (
            {"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [None]}}, "NodeNames": []},
            "ExtenderArgs.Pod is not a valid v1.Pod",
        ),
    ],
)
def test_bad_input_is_a_clear_error_never_a_500(
    cluster: SimulatedKubernetes, body: object, message: str
) -> None:
    data = body if isinstance(body, str) else json.dumps(body)
    client = Client(headers=AUTH)
    response = client.post("/extender/filter", data=data, content_type="application/json")
    assert response.status_code == 200
    assert message in response.json()["Error"]
    assert response.json()["NodeNames"] is None and response.json()["Nodes"] is None
    response = client.post("/extender/prioritize", data=data, content_type="application/json")
    assert response.status_code == 400 and message in response.json()["Error"]
    assert Client(headers=AUTH).get("/extender/filter").status_code == 405


def test_bind_picks_gpu_ids_records_them_and_creates_the_binding(
    cluster: SimulatedKubernetes,
) -> None:
    created = cluster.add_pod(pod_json("serve-0", gpus=2, uid=""))
    uid = created["metadata"]["uid"]
    status, reply = post(
        "/extender/bind",
        {"PodName": "serve-0", "PodNamespace": "ml-team", "PodUID": uid, "Node": "gpu-a"},
    )
    assert status == 200 and reply == {"Error": ""}
    bound = cluster.pod("ml-team", "serve-0")
    assert bound["spec"]["nodeName"] == "gpu-a"
    ids = bound["metadata"]["annotations"]["gpusched.io/gpu-ids"].split(",")
    assert len(ids) == 2
    allocation = Allocation.objects.get(pod=KubePod.objects.get(uid=uid).pod, active=True)
    assert sorted(str(i) for i in allocation.gpus.values_list("gpu__index", flat=True)) == sorted(
        ids
    )

    again = cluster.add_pod(pod_json("serve-1", gpus=4, uid=""))
    status, reply = post(
        "/extender/bind",
        {
            "PodName": "serve-1",
            "PodNamespace": "ml-team",
            "PodUID": again["metadata"]["uid"],
            "Node": "gpu-a",
        },
    )
    assert status == 200 and "does not fit on gpu-a" in reply["Error"]
    status, reply = post("/extender/bind", {"PodName": "x"})
    assert status == 200 and "needs PodNamespace, PodUID, Node" in reply["Error"]


BIND = {"PodName": "serve-0", "PodNamespace": "ml-team", "Node": "gpu-a"}


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    verb=st.sampled_from(["filter", "prioritize", "bind"]),
    authorization=st.one_of(
        st.none(),
        st.just(""),
        st.just("Bearer "),
        st.just(f"Basic {TOKEN}"),
        st.just(f"Bearer {TOKEN}x"),
        st.text(max_size=40).map(lambda t: f"Bearer {t}"),
    ),
)
def test_no_verb_answers_an_unauthenticated_caller(
    cluster: SimulatedKubernetes, verb: str, authorization: str | None
) -> None:
    if not any(p["metadata"]["name"] == "serve-0" for p in cluster.objects("pods")):
        cluster.add_pod(pod_json("serve-0", gpus=2, uid=""))
    body = {**BIND, "PodUID": cluster.pod("ml-team", "serve-0")["metadata"]["uid"]}
    headers = {} if authorization is None else {"Authorization": authorization}
    held = Allocation.objects.filter(active=True).count()  # the default scheduler's pod
    response = Client(headers=headers).post(
        f"/extender/{verb}", data=json.dumps(body), content_type="application/json"
    )
    assert response.status_code == 401 and response.json()["Error"]
    # Nothing was bound, nothing recorded.
    assert cluster.bindings == [] and Allocation.objects.filter(active=True).count() == held
    assert not cluster.pod("ml-team", "serve-0")["spec"].get("nodeName")


def test_the_web_routes_are_off_unless_enabled(cluster: SimulatedKubernetes, settings) -> None:
    settings.WEB_EXTENDER = False
    status, reply = post("/extender/filter", {"Pod": pod_json(), "NodeNames": ["gpu-b"]})
    assert status == 404 and "runextender" in reply["Error"]


def test_without_a_token_file_every_call_is_refused(cluster: SimulatedKubernetes, settings) -> None:
    settings.EXTENDER_TOKEN_FILE = ""
    status, reply = post("/extender/filter", {"Pod": pod_json(), "NodeNames": ["gpu-b"]})
    assert status == 401 and "no extender credentials" in reply["Error"]


def test_quantities_and_nesting_beyond_reason_are_answered_at_once(
    cluster: SimulatedKubernetes,
) -> None:
    pod = pod_json()
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1e600000"
    status, reply = post("/extender/filter", {"Pod": pod, "NodeNames": ["gpu-b"]})
    assert status == 200 and "cpu: '1e600000' is more than any cluster has" in reply["Error"]
    deep = "[" * 10_000 + "]" * 10_000
    response = Client(headers=AUTH).post(
        "/extender/filter", data=deep, content_type="application/json"
    )
    assert response.status_code == 200 and "deeper than 64 levels" in response.json()["Error"]
    response = Client(headers=AUTH).post(
        "/extender/prioritize", data=deep, content_type="application/json"
    )
    assert response.status_code == 400 and "deeper than 64 levels" in response.json()["Error"]
