"""Bad input: a 400 whose extra.fields names every offending field, and nothing written."""

import copy
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


CASES = [
    # (change, field path, words in the message)
    (_requests(**{"amd.com/gpu": "1"}), f"{REQ}.amd.com/gpu", "unknown resource"),
    (_gpu("9"), f"{REQ}.nvidia.com/gpu", "no node of model NVIDIA-H100-80GB-HBM3 has more than 8"),
    (_gpu("-1"), f"{REQ}.nvidia.com/gpu", "must not be negative"),
    (_requests(cpu="-500m"), f"{REQ}.cpu", "must not be negative"),
    (_gpu("0.5"), f"{REQ}.nvidia.com/gpu", "gpusched.io/gpu-milli"),
    (_gpu("lots"), f"{REQ}.nvidia.com/gpu", "not a quantity"),
    (_gpu("Infinity"), f"{REQ}.nvidia.com/gpu", "not a quantity"),
    # Magnitudes beyond any cluster are refused from the text, before any number is built.
    (_requests(cpu="1e999990"), f"{REQ}.cpu", "more than any cluster has"),
    (_requests(memory="1e5000"), f"{REQ}.memory", "more than any cluster has"),
    (_gpu("4Gi"), f"{REQ}.nvidia.com/gpu", "plain number"),
    (_gpu(True), f"{REQ}.nvidia.com/gpu", "quantity"),
    (_requests(cpu="10000"), f"{REQ}.cpu", "the largest node has 64"),
    (_requests(memory="10Ti"), f"{REQ}.memory", "the largest node has"),
    (
        _requests(**{"gpusched.io/gpu-milli": "500"}),
        f"{REQ}.gpusched.io/gpu-milli",
        "not also nvidia.com/gpu",
    ),
    (_requests(**{"nvidia.com/mig-7g.80gb": "1"}), f"{REQ}.nvidia.com/mig-7g.80gb", "MIG"),
    (_requests(**{"nvidia.com/mig-huge": "1"}), f"{REQ}.nvidia.com/mig-huge", "MIG profile"),
    (_set("queueName", "team-z"), "queueName", "unknown queue 'team-z'"),
    (_set("priorityClassName", "gold"), "priorityClassName", "unknown priority class"),
    (_set("name", "Not_A_Name"), "name", "DNS label"),
    (_set("serviceClass", "premium"), "serviceClass", "valid choice"),
    (_set("podSets", []), "podSets", "at least 1"),
    (_set("podSets.0.count", 0), "podSets[0].count", "greater than or equal to 1"),
    (_set("podSets.0.minCount", 3), "podSets[0].minCount", "at most count"),
    (_set("podSets.0.minCout", 3), "podSets[0].minCout", "unknown field"),
    (_set("podSets.0.template.gpuModels", ["B200"]), "podSets[0].template.gpuModels[0]", "B200"),
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


@pytest.mark.parametrize(("change", "field", "words"), CASES)
def test_bad_input_names_the_field(team_a, cluster, change, field: str, words: str) -> None:
    doc = copy.deepcopy(LLAMA)
    change(doc)
    response = submit(team_a, doc)
    assert response.status_code == 400, response.json()
    fields = response.json()["extra"]["fields"]
    assert field in fields, fields
    assert words in " ".join(fields[field])
    assert not Workload.objects.exists() and not Pod.objects.exists()


def test_every_problem_is_reported_at_once(team_a, cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["queueName"] = "nope"
    doc["podSets"][0]["template"]["resources"]["requests"].update(
        {"nvidia.com/gpu": "9", "cpu": "-1"}
    )
    response = submit(team_a, doc)
    assert response.status_code == 400
    assert set(response.json()["extra"]["fields"]) == {
        "queueName",
        f"{REQ}.nvidia.com/gpu",
        f"{REQ}.cpu",
    }
    assert response.json()["message"] == "Invalid input."


def test_single_problem_message_names_the_field(team_a, cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    _gpu("9")(doc)
    message = submit(team_a, doc).json()["message"]
    assert message.startswith(f"{REQ}.nvidia.com/gpu: 9 GPUs per pod")


def test_shares_need_a_shared_gpu_model(team_a, cluster) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["podSets"][0]["template"]["resources"]["requests"] = {"gpusched.io/gpu-milli": "250"}
    response = submit(team_a, doc)  # gpuModels: H100, which is exclusive here
    assert response.status_code == 400
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
