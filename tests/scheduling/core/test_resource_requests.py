"""One pod's Resources to Kubernetes quantities and back (scheduling/core/resource_requests.py)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.core import quantity, resource_requests
from scheduling.core.types import PodRequest, Resources
from tests.scheduling.core.strategies import RESOURCES


@given(RESOURCES)
def test_resources_to_kubernetes_and_back_is_the_same(resources: Resources) -> None:
    written = resource_requests.write(resources)
    assert all(isinstance(text, str) for text in written.values())
    back, problems = resource_requests.read(written)
    assert problems == {}
    assert back == resources


_QUANTITY_TEXT = {
    "cpu": st.one_of(
        st.integers(0, 10**5).map(lambda n: f"{n}m"),
        st.integers(0, 64).map(str),
        st.decimals(0, 64, places=3).map(str),
    ),
    "memory": st.one_of(
        st.integers(0, 512).map(lambda n: f"{n}Gi"),
        st.integers(0, 10**6).map(lambda n: f"{n}Mi"),
        st.integers(0, 10**12).map(str),  # bytes
        st.integers(0, 900).map(lambda n: f"{n}G"),
    ),
    "nvidia.com/gpu": st.integers(0, 16).map(str),
    "example.com/credits": st.one_of(st.integers(0, 999).map(str), st.just("2k")),
}


@given(st.fixed_dictionaries({}, optional=_QUANTITY_TEXT))
def test_kubernetes_to_resources_to_kubernetes_keeps_the_amounts(
    requests: dict[str, str],
) -> None:
    resources, problems = resource_requests.read(requests)
    assert problems == {}
    written = resource_requests.write(resources)
    # Written in canonical form: reading it again changes nothing, writing it again neither.
    again, _ = resource_requests.read(written)
    assert again == resources and resource_requests.write(again) == written
    for resource, text in requests.items():
        exact = quantity.parse(text, count=quantity.is_count(resource))
        amount = resource_requests.amounts(resources).get(resource, 0)
        if resource == "cpu":
            assert amount == -(-exact * 1000 // 1)  # rounded up to the milli-CPU
        elif resource == "memory":
            assert amount == -(-exact // quantity.MIB)  # rounded up to the MiB
        else:
            assert amount == exact


def test_a_podrequest_is_built_from_resources_and_gives_them_back() -> None:
    resources = Resources(cpu_milli=500, memory_mib=1024, mig_profile="1g.10gb", mig_count=2)
    request = PodRequest.of(resources, "uid-1", name="p", priority=7)
    assert (request.uid, request.name, request.priority) == ("uid-1", "p", 7)
    assert request.resources == resources and request.mig_count == 2


def test_exact_amounts_are_read_as_the_kubelet_summed_them() -> None:
    resources, problems = resource_requests.read({"cpu": Fraction(3, 2), "nvidia.com/gpu": 2})
    assert problems == {} and (resources.cpu_milli, resources.gpus) == (1500, 2)


@pytest.mark.parametrize(
    ("requests", "resource", "words"),
    [
        ({"gpu": "1"}, "gpu", "unknown resource"),
        ({"nvidia.com/mig-huge": "1"}, "nvidia.com/mig-huge", "unknown MIG profile"),
        ({"nvidia.com/gpu": "0.5"}, "nvidia.com/gpu", "gpusched.io/gpu-milli"),
        ({"gpusched.io/gpu-milli": "1000"}, "gpusched.io/gpu-milli", "share of one GPU"),
        ({"example.com/credits": "500m"}, "example.com/credits", "not a whole number"),
        (
            {"nvidia.com/gpu": "1", "gpusched.io/gpu-milli": "500"},
            "gpusched.io/gpu-milli",
            "not several (not also nvidia.com/gpu)",
        ),
        ({"cpu": "1e999990"}, "cpu", "more than any cluster has"),
    ],
)
def test_what_cannot_be_used_is_named_and_left_out(
    requests: dict[str, str], resource: str, words: str
) -> None:
    resources, problems = resource_requests.read(requests)
    assert words in problems[resource]
    assert resource_requests.amounts(resources).get(resource, 0) == 0
