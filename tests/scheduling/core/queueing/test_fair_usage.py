"""Admission fair sharing's arithmetic, checked against Kueue's formulas
(pkg/util/admissionfairsharing/admission_fair_sharing.go)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.queueing.config import AdmissionFairSharing
from scheduling.core.queueing.fair_usage import (
    alpha,
    decayed,
    entry_penalty,
    in_base_units,
    weighted_usage,
)

DAY = 86400.0
SETTINGS = AdmissionFairSharing(usage_half_life_s=DAY, usage_sampling_interval_s=300.0)


def test_alpha_is_kueues_decay_rate() -> None:
    assert alpha(300, 168 * 3600) == pytest.approx(1 - 0.5 ** (300 / (168 * 3600)))
    assert alpha(DAY, DAY) == pytest.approx(0.5)
    assert alpha(300, 0) == 0.0  # Kueue: a zero half-life gives rate 0


def test_history_halves_over_one_half_life_without_use() -> None:
    assert decayed({"cpu": 8.0}, {}, DAY, SETTINGS) == pytest.approx({"cpu": 4.0})


def test_history_moves_toward_current_use() -> None:
    after = decayed({"nvidia.com/gpu": 0.0}, {"nvidia.com/gpu": 8.0}, DAY, SETTINGS)
    assert after == pytest.approx({"nvidia.com/gpu": 4.0})
    assert decayed({"cpu": 3.0}, {"cpu": 1.0}, 0, SETTINGS) == pytest.approx({"cpu": 3.0})


def test_a_zero_half_life_resets_the_history() -> None:
    reset = AdmissionFairSharing(usage_half_life_s=0, usage_sampling_interval_s=300)
    assert decayed({"cpu": 3.0}, {"cpu": 5.0}, 300, reset) == {}


def test_entry_penalty_is_the_sampling_share_of_the_request() -> None:
    penalty = entry_penalty({"nvidia.com/gpu": 4.0}, SETTINGS)
    assert penalty == pytest.approx({"nvidia.com/gpu": 4.0 * alpha(300, DAY)})


def test_weighted_usage_follows_resource_weights_and_the_queues_weight() -> None:
    settings = AdmissionFairSharing(resource_weights={"cpu": 2.0, "memory": 0.0})
    consumed = {"cpu": 3.0, "memory": 2.0**30, "nvidia.com/gpu": 1.0}
    assert weighted_usage(consumed, 1.0, settings) == pytest.approx(7.0)
    assert weighted_usage(consumed, 2.0, settings) == pytest.approx(3.5)
    assert weighted_usage(consumed, 0.0, settings) == math.inf


def test_quota_usage_is_flattened_over_flavors_in_base_units() -> None:
    usage = {
        ("h100", "nvidia.com/gpu"): 2000,
        ("a100", "nvidia.com/gpu"): 500,
        ("h100", "cpu"): 1500,
    }
    assert in_base_units(usage) == {"nvidia.com/gpu": 2.5, "cpu": 1.5}


@given(
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(0, 30 * DAY),
)
def test_the_history_stays_between_its_past_and_the_present(old, current, elapsed) -> None:
    value = decayed({"cpu": old}, {"cpu": current}, elapsed, SETTINGS).get("cpu", 0.0)
    assert min(old, current) - 1e-6 <= value <= max(old, current) + 1e-6
