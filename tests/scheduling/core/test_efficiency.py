import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.efficiency import over_request, reclaimable_milli, right_size, usage_ratio


@pytest.mark.parametrize(
    ("requested", "used", "index"),
    [(8, 2, 4.0), (1, 1, 1.0), (4, 0, None), (4, 0.001, None), (0, 1, None), (2, None, None)],
)
def test_over_request_index(requested: float, used: float | None, index: float | None) -> None:
    assert over_request(requested, used) == index


def test_usage_ratio_is_bounded_and_pessimistic_without_data() -> None:
    assert usage_ratio(8, 2) == 0.25
    assert usage_ratio(8, 0) == 0.05
    assert usage_ratio(1, 3) == 1.0
    assert usage_ratio(4, None) == 1.0


@pytest.mark.parametrize(
    ("allocated", "used", "margin", "lendable"),
    [(1000, 200, 0.2, 760), (1000, 900, 0.2, 0), (500, 0, 0.5, 500)],
)
def test_reclaimable(allocated: int, used: float, margin: float, lendable: int) -> None:
    assert reclaimable_milli(allocated, used, margin) == lendable


def test_right_size_whole_gpus_and_shares() -> None:
    whole = right_size(8, 1.6)
    assert (whole.recommended_gpus, whole.recommended_milli, whole.saving_gpus) == (2, 0, 6.0)
    assert whole.resource == "nvidia.com/gpu: 2"
    share = right_size(1, 0.3)
    assert (share.recommended_gpus, share.recommended_milli) == (0, 400)
    assert share.resource == "gpusched.io/gpu-milli: 400"


@given(st.floats(0.01, 64), st.floats(0, 64), st.floats(0, 1))
def test_advice_always_covers_the_peak(requested: float, used: float, margin: float) -> None:
    advice = right_size(requested, used, margin)
    covered = advice.recommended_gpus + advice.recommended_milli / 1000
    assert covered >= used * (1 + margin) - 1e-9
    assert advice.saving_gpus >= 0
