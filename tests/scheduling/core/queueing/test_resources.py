"""Resource names and units as quotas count them: any Kubernetes resource name, whole units for
extended resources and pods."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.queueing.resources import (
    Demand,
    QuantityError,
    base_units,
    format_quantity,
    is_extended,
    parse_quantity,
    resource_name_error,
    to_canonical,
)
from scheduling.core.types import PodRequest


@pytest.mark.parametrize(
    "name",
    [
        "cpu",
        "memory",
        "pods",
        "ephemeral-storage",
        "hugepages-2Mi",
        "nvidia.com/gpu",
        "nvidia.com/mig-1g.10gb",
        "example.com/credits",
        "rdma/hca",
        "amd.com/gpu",
    ],
)
def test_names_quotas_can_count(name) -> None:
    assert resource_name_error(name) is None


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("gpu", "a name without a domain"),
        ("Example.com/x", "is not a DNS subdomain"),
        ("example.com/-x", "is not a valid name"),
        ("kubernetes.io/batch", "kubernetes.io domain"),
        ("", "is not a resource name"),
        (7, "is not a resource name"),
    ],
)
def test_names_quotas_refuse(name, words) -> None:
    error = resource_name_error(name)
    assert error is not None and words in error


@pytest.mark.parametrize(
    ("resource", "value", "canonical"),
    [
        ("pods", 5, 5),
        ("example.com/credits", "1k", 1000),
        ("rdma/hca", "4", 4),
        ("ephemeral-storage", "10Gi", 10 * 1024),
        ("hugepages-2Mi", "4Mi", 4),
    ],
)
def test_canonical_units(resource, value, canonical) -> None:
    assert parse_quantity(resource, value) == canonical


@pytest.mark.parametrize("resource", ["pods", "example.com/credits", "nvidia.com/mig-1g.10gb"])
def test_counted_resources_are_whole_numbers(resource) -> None:
    # Device counts and pods take plain numbers at all; extended resources whole units.
    with pytest.raises(QuantityError, match="not a whole number|plain number"):
        parse_quantity(resource, "500m")


def test_extended_resources_are_counted_only() -> None:
    assert is_extended("example.com/credits") and is_extended("ephemeral-storage")
    assert not any(is_extended(r) for r in ("cpu", "memory", "pods", "nvidia.com/gpu"))
    assert not is_extended("nvidia.com/mig-3g.40gb")


def test_a_demand_counts_pods_and_extended_resources_per_pod() -> None:
    pod = PodRequest(uid="p", cpu_milli=500, extended={"example.com/credits": 30, "rdma/hca": 1})
    demand = Demand.of_pods([(pod, 4)])
    assert demand.amounts() == {
        "cpu": 2000,
        "pods": 4,
        "example.com/credits": 120,
        "rdma/hca": 4,
    }
    assert (demand + demand).amounts()["example.com/credits"] == 240


@given(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods", "example.com/x"]),
    st.integers(0, 10**9),
)
def test_base_units_invert_the_canonical_units(resource, amount) -> None:
    # What admission fair sharing weighs is the canonical amount back in Kubernetes' base units.
    back = to_canonical(resource, Decimal(repr(base_units(resource, amount))))
    assert abs(back - amount) <= 1
    assert format_quantity(resource, amount)
