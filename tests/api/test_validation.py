"""Bad input: a 400 (the request breaks the schema) or a 422 (well formed, refused for what it
asks) whose extra.fields names every offending field, fast, with nothing written."""

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from scheduling.models import Pod, Workload
from tests.api.conftest import LLAMA, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

REQ = "podSets[0].template.resources.requests"


def _requests(**values: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        doc["podSets"][0]["template"]["resources"]["requests"].update(values)

    return change


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if part.isdigit() else node[part]
        node[last] = value

    return change


def _gpu(value: Any) -> Callable[[dict[str, Any]], None]:
    return _requests(**{"nvidia.com/gpu": value})


# The request breaks the schema: 400 (tests/api/test_schema.py holds the schema to the server).
MALFORMED = [
    # (change, field path, words in the message)
    (_requests(**{"bad key!": "1"}), f"{REQ}.bad key!", "not a resource name"),
    (_gpu("-1"), f"{REQ}.nvidia.com/gpu", "plain number"),
    # A GPU model of nothing but whitespace: blank once trimmed, as the schema's pattern says
    # (schemathesis sent a vertical tab, within the schema as it was, and got this 400).
    (_set("podSets.0.template.gpuModels", ["\v"]), "podSets[0].template.gpuModels[0]", "blank"),
    (_requests(cpu="-500m"), f"{REQ}.cpu", "not a quantity"),
    (_requests(cpu=-1), f"{REQ}.cpu", "must not be negative"),
    (_gpu("lots"), f"{REQ}.nvidia.com/gpu", "plain number"),
    (_requests(cpu="Infinity"), f"{REQ}.cpu", "not a quantity"),
    (_gpu(True), f"{REQ}.nvidia.com/gpu", "quantity"),
    (_gpu("4Gi"), f"{REQ}.nvidia.com/gpu", "plain number"),
    (_set("name", "Not_A_Name"), "name", "DNS label"),
    (_set("name", 0), "name", "must be a string"),
    (_set("podSets.0.count", "2"), "podSets[0].count", "must be an integer"),
    (_set("podSets.0.count", 2.5), "podSets[0].count", "must be an integer"),
    (_set("serviceClass", "premium"), "serviceClass", "valid choice"),
    (_set("podSets", []), "podSets", "at least 1"),
    (_set("podSets.0.count", 0), "podSets[0].count", "greater than or equal to 1"),
    (_set("podSets.0.minCout", 3), "podSets[0].minCout", "unknown field"),
    (
        _set("podSets.0.template.topology", {"policy": "tight"}),
        "podSets[0].template.topology.policy",
        "valid choice",
    ),
    (
        _set("podSets.0.template.tolerations", [{"operator": "Maybe"}]),
        "podSets[0].template.tolerations[0].operator",
        "valid choice",
    ),
    (_set("extra", 1), "extra", "unknown field"),
]

# Well formed, but refused for what it names or asks: 422, in the same shape.
REFUSED = [
    (_requests(gpu="1"), f"{REQ}.gpu", "unknown resource"),
    (_requests(**{"example.com/credits": "1.5"}), f"{REQ}.example.com/credits", "whole number"),
    (_requests(**{"nvidia.com/mig-huge": "1"}), f"{REQ}.nvidia.com/mig-huge", "MIG profile"),
    (_gpu("9"), f"{REQ}.nvidia.com/gpu", "no node of model NVIDIA-H100-80GB-HBM3 has more than 8"),
    (_gpu("0.5"), f"{REQ}.nvidia.com/gpu", "gpusched.io/gpu-milli"),
    (_requests(cpu="10000"), f"{REQ}.cpu", "the largest node has 64"),
    (_requests(memory="10Ti"), f"{REQ}.memory", "the largest node has"),
    # Magnitudes beyond any cluster are refused from the text, before any number is built.
    (_requests(cpu="1e999990"), f"{REQ}.cpu", "more than any cluster has"),
    (_requests(memory="1e5000"), f"{REQ}.memory", "more than any cluster has"),
    (
        _requests(**{"gpusched.io/gpu-milli": "500"}),
        f"{REQ}.gpusched.io/gpu-milli",
        "not also nvidia.com/gpu",
    ),
    (_requests(**{"nvidia.com/mig-7g.80gb": "1"}), f"{REQ}.nvidia.com/mig-7g.80gb", "MIG"),
    (_set("queueName", "team-z"), "queueName", "unknown queue 'team-z'"),
    (_set("priorityClassName", "gold"), "priorityClassName", "unknown priority class"),
    (_set("podSets.0.minCount", 3), "podSets[0].minCount", "at most count"),
    (_set("podSets.0.minCount", 512.0), "podSets[0].minCount", "at most count"),
    (_set("podSets.0.template.gpuModels", ["B200"]), "podSets[0].template.gpuModels[0]", "B200"),
]


@pytest.mark.parametrize(
    ("change", "field", "words", "status"),
    [(*case, 400) for case in MALFORMED] + [(*case, 422) for case in REFUSED],
)
def test_bad_input_names_the_field(team_a, cluster, change, field: str, words: str, status) -> None:
    doc = copy.deepcopy(LLAMA)
    change(doc)
    response = submit(team_a, doc)
    assert response.status_code == status, response.json()
    fields = response.json()["extra"]["fields"]
    assert field in fields, fields
    assert words in " ".join(fields[field])
    assert not Workload.objects.exists() and not Pod.objects.exists()


def test_a_whole_number_written_with_a_fraction_is_an_integer(team_a, cluster) -> None:
    """JSON Schema's integer includes 2.0 (schemathesis sends such numbers)."""
    doc = copy.deepcopy(LLAMA)
    doc["podSets"][0].update(count=2.0, minCount=2.0)
    response = submit(team_a, doc)
    assert response.status_code == 201, response.json()
    assert Pod.objects.count() == 2


def test_every_problem_is_reported_at_once(team_a, cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["queueName"] = "nope"
    doc["podSets"][0]["template"]["resources"]["requests"].update(
        {"nvidia.com/gpu": "9", "cpu": "1e30"}
    )
    response = submit(team_a, doc)
    assert response.status_code == 422
    assert set(response.json()["extra"]["fields"]) == {
        "queueName",
        f"{REQ}.nvidia.com/gpu",
        f"{REQ}.cpu",
    }
    assert response.json()["message"] == "Invalid input."


def _selector(doc: dict[str, Any], selector: dict[str, str]) -> None:
    doc["podSets"][0]["template"]["nodeSelector"] = selector
    doc["podSets"][0]["count"] = 500
    doc["podSets"][0]["minCount"] = None


@pytest.mark.parametrize(
    ("selector", "field", "words"),
    [
        # Just under the body limit (a whole MiB is over it: 413, below).
        ({"k" * 1_000_000: "v"}, "nodeSelector.kkkkkkkkkk", "at most 317 characters"),
        ({f"k{i}": "v" for i in range(10_000)}, "nodeSelector", "at most 32 entries"),
        ({"zone": "v" * 64}, "nodeSelector.zone", "at most 63 characters"),
        ({"bad key!": "v"}, "nodeSelector.bad key!", "qualified name"),
        ({"zone": "eu 1"}, "nodeSelector.zone", "letters, digits"),
    ],
)
def test_node_selectors_are_bounded(team_a, cluster, selector, field: str, words: str) -> None:
    doc = copy.deepcopy(LLAMA)
    _selector(doc, selector)
    response = submit(team_a, doc)
    assert response.status_code == 400
    fields = response.json()["extra"]["fields"]
    (path,) = [p for p in fields if p.startswith(f"podSets[0].template.{field}")]
    assert words in " ".join(fields[path])
    assert len(response.content) < 2000  # the 1 MiB key is not echoed back
    assert not Workload.objects.exists()


def test_bodies_over_the_upload_limit_get_the_api_error_shape(team_a, settings) -> None:
    body = json.dumps({**LLAMA, "pad": "a" * settings.DATA_UPLOAD_MAX_MEMORY_SIZE})
    response = team_a.client.post("/api/v1/workloads", body, content_type="application/json")
    assert response.status_code == 413 and response["Content-Type"] == "application/json"
    assert response.json()["extra"]["maxBodyBytes"] == settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def test_deeply_nested_json_is_a_400(team_a) -> None:
    deep = "[" * 10_000 + "]" * 10_000
    response = team_a.client.post("/api/v1/workloads", deep, content_type="application/json")
    assert response.status_code == 400 and "deeper than 64 levels" in response.json()["message"]


def test_single_problem_message_names_the_field(team_a, cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    _gpu("9")(doc)
    message = submit(team_a, doc).json()["message"]
    assert message.startswith(f"{REQ}.nvidia.com/gpu: 9 GPUs per pod")


def test_shares_need_a_shared_gpu_model(team_a, cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["podSets"][0]["template"]["resources"]["requests"] = {"gpusched.io/gpu-milli": "250"}
    response = submit(team_a, doc)  # gpuModels: H100, which is exclusive here
    assert response.status_code == 422
    assert (
        "shares its GPUs" in response.json()["extra"]["fields"][f"{REQ}.gpusched.io/gpu-milli"][0]
    )


def test_malformed_json_is_400(team_a) -> None:
    response = team_a.client.post(
        "/api/v1/workloads", data="{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert "JSON" in response.json()["message"]


def test_body_must_be_an_object(team_a) -> None:
    response = team_a.client.post("/api/v1/workloads", [1, 2], format="json")
    assert response.status_code == 400


def test_no_nodes_means_no_cluster_checks(team_a) -> None:
    """Before any node registers (a cluster still syncing) only the request itself is checked."""
    doc = copy.deepcopy(LLAMA)
    _gpu("16")(doc)
    assert submit(team_a, doc).status_code == 201


def test_a_key_named_twice_is_a_400_naming_it_and_nothing_is_written(team_a, cluster) -> None:
    body = json.dumps(LLAMA)
    count = f'"count": {LLAMA["podSets"][0]["count"]}'
    assert count in body
    twice = body.replace(count, count + ', "count": 1000', 1)
    response = team_a.client.post("/api/v1/workloads", twice, content_type="application/json")
    assert response.status_code == 400
    assert "'count' twice" in response.json()["message"]
    assert not Workload.objects.exists() and not Pod.objects.exists()


@pytest.mark.parametrize("path", ["/api/v1/workloads/a%00b", "/api/v1/workloads?state=%00"])
def test_a_nul_in_the_path_or_query_is_a_400_not_a_500(team_a, path) -> None:
    response = team_a.client.get(path)
    assert response.status_code == 400
    assert "NUL" in response.json()["message"]
