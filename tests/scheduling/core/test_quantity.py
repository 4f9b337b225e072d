"""The one quantity parser: Kubernetes' grammar, exact values, and a magnitude check made on the
text before any number is built, so `1e999990` is refused at once instead of costing seconds."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from kubernetes.utils import parse_quantity as kubernetes_parse

from scheduling.core import quantity as q

SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]


@st.composite
def quantities(draw: st.DrawFn) -> str:
    """Texts of Kubernetes' grammar within the bounds (small exponents)."""
    whole = draw(st.text("0123456789", min_size=1, max_size=8))
    fraction = draw(st.one_of(st.none(), st.text("0123456789", max_size=6)))
    number = whole if fraction is None else f"{whole}.{fraction}"
    tail = draw(
        st.one_of(
            st.sampled_from(SUFFIXES),
            st.integers(-6, 6).map(lambda e: f"e{e}"),
        )
    )
    return number + tail


@given(quantities())
def test_values_agree_with_the_kubernetes_client(text: str) -> None:
    expected = Fraction(Decimal(kubernetes_parse(text)))
    assume(expected <= 10**q.MAX_ORDER)  # beyond is refused (below)
    assert q.parse(text) == expected


@given(st.text(max_size=80) | st.from_regex(r"\A[+-]?[0-9.]{1,20}[eE][+-]?[0-9]{1,60}\Z"))
def test_any_text_is_a_bounded_value_or_a_quantity_error(text: str) -> None:
    try:
        value = q.parse(text, negative=True)
    except q.QuantityError as exc:
        assert str(exc)
    else:
        assert abs(value) <= Fraction(10) ** (q.MAX_ORDER + 1)
        assert value == 0 or abs(value) >= Fraction(1, 10 ** -(q.MIN_ORDER - 1))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("1e999990", "more than any cluster has"),
        ("1e5000", "more than any cluster has"),
        ("1e600000", "more than any cluster has"),
        ("99999999999999999999999Ei", "more than any cluster has"),
        ("1e-999999", "smallest unit"),
        ("-1", "must not be negative"),
        ("Infinity", "not a quantity"),
        ("NaN", "not a quantity"),
        ("1e", "not a quantity"),
        (".", "not a quantity"),
        ("8ki", "not a quantity"),
        ("1" * 65, "longer than 64"),
    ],
)
def test_refusals_say_why(text: str, words: str) -> None:
    with pytest.raises(q.QuantityError, match=words):
        q.parse(text)


def test_huge_integers_are_refused_before_formatting() -> None:
    with pytest.raises(q.QuantityError, match="more than any cluster has"):
        q.parse(10**5000)


@pytest.mark.parametrize("resource", ["nvidia.com/gpu", "gpusched.io/gpu-milli", "pods"])
@pytest.mark.parametrize("text", ["4Gi", "4k", "4e0", "1E3"])
def test_device_counts_take_plain_numbers(resource: str, text: str) -> None:
    with pytest.raises(q.QuantityError, match="plain number"):
        q.quota_amount(resource, text) if resource != "gpusched.io/gpu-milli" else q.pod_amount(
            resource, text
        )


def test_units() -> None:
    assert q.pod_amount("cpu", "500m") == 500
    assert q.pod_amount("cpu", "0.0001") == 1  # requests round up
    assert q.cpu_milli(Fraction(1, 10_000), round_up=False) == 0  # what nodes offer, down
    assert q.pod_amount("memory", "64Gi") == 64 * 1024
    assert q.pod_amount("nvidia.com/gpu", "4") == 4
    assert q.quota_amount("nvidia.com/gpu", "2.5") == 2500
    assert q.pod_amount("nvidia.com/mig-1g.10gb", 2) == 2
    with pytest.raises(q.QuantityError, match="more than any cluster has"):
        q.pod_amount("cpu", "1e15")
