"""A pod set's template as a Kubernetes PodTemplateSpec (Kueue's Workload shape), beside the short
form: containers' requests and limits summed as the kubelet sums them, nodeSelector, tolerations,
topology from annotations; mixing the forms, bad annotations and unjudged constraints refused
with the field named."""

from __future__ import annotations

from typing import Any

import pytest

from scheduling.models import Pod
from tests.api.conftest import submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def kueue_shaped(template: dict[str, Any], name: str = "train") -> dict[str, Any]:
    return {
        "name": name,
        "podSets": [{"name": "workers", "count": 2, "minCount": 2, "template": template}],
    }


SPEC: dict[str, Any] = {
    "metadata": {
        "annotations": {
            "gpusched.io/topology-policy": "single-numa-node",
            "gpusched.io/gpu-models": "H100",
        },
        "labels": {"app": "train"},
    },
    "spec": {
        "containers": [
            {
                "name": "trainer",
                "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "command": ["torchrun", "train.py"],
                "resources": {
                    "requests": {"cpu": "8", "memory": "64Gi"},
                    "limits": {"nvidia.com/gpu": "4"},  # requests default to limits
                },
            },
            {"name": "logger", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
        ],
        "initContainers": [{"name": "fetch", "resources": {"requests": {"cpu": "16"}}}],
        "nodeSelector": {"topology.kubernetes.io/zone": "a"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    },
}


def test_a_pod_template_spec_is_read_like_the_short_form(team_a, cluster) -> None:
    response = submit(team_a, kueue_shaped(SPEC))
    assert response.status_code == 201, response.json()
    pods = list(Pod.objects.filter(workload__name="train"))
    assert len(pods) == 2
    pod = pods[0]
    # cpu: max(8 + 0.5, the init container's 16) as the kubelet counts it; memory 64Gi + 1Gi.
    assert (pod.cpu_milli, pod.memory_mib, pod.gpus) == (16_000, 65 * 1024, 4)
    assert pod.topology_policy == "single-numa-node"
    assert pod.constraints.gpu_models == ["NVIDIA-H100-80GB-HBM3"]
    assert pod.constraints.node_selector == {"topology.kubernetes.io/zone": "a"}
    assert pod.constraints.tolerations[0]["key"] == "dedicated"
    assert pod.gang_min_count == 2
    stored = response.json()["podSets"][0]["template"]
    assert stored["topology"] == {"policy": "single-numa-node"}
    assert stored["resources"]["requests"]["nvidia.com/gpu"] == "4"


def test_the_short_form_still_works_as_a_shorthand(team_a, cluster) -> None:
    template = {"resources": {"requests": {"cpu": "2", "nvidia.com/gpu": "1"}}}
    assert submit(team_a, kueue_shaped(template)).status_code == 201
    assert Pod.objects.filter(workload__name="train", gpus=1, cpu_milli=2000).count() == 2


@pytest.mark.parametrize(
    ("template", "field"),
    [
        (
            {**SPEC, "resources": {"requests": {"cpu": "1"}}},
            "podSets[0].template.resources",
        ),
        ({"metadata": SPEC["metadata"]}, "podSets[0].template.metadata"),
        (
            {
                "metadata": {"annotations": {"gpusched.io/topology-policy": "tight"}},
                "spec": SPEC["spec"],
            },
            "podSets[0].template.metadata.annotations.gpusched.io/topology-policy",
        ),
        (
            {"spec": {**SPEC["spec"], "affinity": {"podAntiAffinity": {"x": 1}}}},
            "podSets[0].template.spec.affinity",
        ),
        ({"spec": {"containers": []}}, "podSets[0].template.spec.containers"),
        (
            {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}},
            "podSets[0].template.spec.containers[0].resources.requests.cpu",
        ),
    ],
)
def test_bad_pod_template_specs_name_the_field(team_a, cluster, template, field) -> None:
    response = submit(team_a, kueue_shaped(template))
    assert response.status_code == 400, response.json()
    assert field in response.json()["extra"]["fields"], response.json()


@pytest.mark.parametrize(
    ("resource", "value", "words"),
    [
        ("cpu", 1.7976931348623155e308, "more than any cluster has"),
        ("memory", 4.153865380856625e-88, "below any resource's smallest unit"),
        ("pods", 2.6744754112032416e16, "a count takes a plain number"),
    ],
)
def test_a_well_formed_quantity_refused_for_its_value_is_a_422(
    team_a, cluster, resource: str, value: float, words: str
) -> None:
    """The schema lets any number >= 0 through, as in the short form: its value is refused with
    a 422, never a 400 (tests/api/test_schema.py holds the server to that)."""
    spec = {"containers": [{"name": "c", "resources": {"requests": {resource: value}}}]}
    response = submit(team_a, kueue_shaped({"spec": spec}))
    assert response.status_code == 422, response.json()
    assert words in " ".join(response.json()["extra"]["fields"]["podSets[0].template.spec"])


def test_a_pod_template_spec_no_node_could_host_is_refused(team_a, cluster) -> None:
    spec = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "16"}}}]}
    response = submit(team_a, kueue_shaped({"spec": spec}))
    assert response.status_code in (400, 422), response.json()
    assert any("nvidia.com/gpu" in key for key in response.json()["extra"]["fields"])
