"""Run-time prediction from finished jobs: the most specific group with enough samples speaks,
its basis says which, a running job is predicted from the similar jobs that ran longer."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.queueing.runtime import JobShape, RuntimePredictor, name_pattern, spread


def shape(tenant: str = "vision", name: str = "train-001", gpus: int = 8) -> JobShape:
    return JobShape.of(tenant, name, pod_sets=((1, gpus),))


def test_name_patterns_drop_counters_and_hashes() -> None:
    assert name_pattern("train-resnet-0042-a1b2c") == "train-resnet"
    assert name_pattern("eval_7") == "eval"
    assert name_pattern("12345") == "12345"


def test_nothing_finished_nothing_predicted() -> None:
    assert RuntimePredictor().predict(shape()) is None


def test_the_most_specific_group_with_enough_samples_speaks() -> None:
    predictor = RuntimePredictor(min_samples=3)
    for k in range(3):
        predictor.observe(shape(name=f"train-{k:03d}"), 600.0)
    for k in range(10):
        predictor.observe(shape(name=f"eval-{k}"), 60.0)
    train = predictor.predict(shape(name="train-777"))
    assert train is not None and train.p50_s == 600.0
    assert train.basis.startswith("p50 of 3 similar jobs") and "name train" in train.basis
    other = predictor.predict(shape(name="new-job"))  # no such name: the tenant and shape
    assert other is not None and other.samples == 13 and "name" not in other.basis
    stranger = predictor.predict(shape(tenant="nlp", gpus=1, name="x"))
    assert stranger is not None and stranger.basis.endswith("(all tenants)")


def test_a_running_job_is_predicted_from_those_that_ran_longer() -> None:
    predictor = RuntimePredictor(min_samples=2)
    for duration in (100.0, 200.0, 1000.0, 1200.0):
        predictor.observe(shape(), duration)
    running = predictor.predict(shape(), elapsed_s=500.0)
    assert running is not None and running.p50_s == 1100.0
    assert "ran longer" in running.basis
    outlived = predictor.predict(shape(), elapsed_s=5000.0)
    assert outlived is not None and outlived.p50_s == 10_000.0 and outlived.p90_s == 50_000.0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1e6), min_size=1, max_size=60))
def test_quantiles_lie_within_what_was_seen_and_p50_le_p90(durations: list[float]) -> None:
    predictor = RuntimePredictor()
    for d in durations:
        predictor.observe(shape(), d)
    p = predictor.predict(shape())
    assert p is not None
    assert min(durations) <= p.p50_s <= p.p90_s <= max(durations)


@settings(max_examples=30, deadline=None)
@given(
    durations=st.lists(st.floats(min_value=1, max_value=1e6), min_size=5, max_size=40),
    elapsed=st.floats(min_value=0, max_value=2e6),
)
def test_quantiles_are_those_the_prediction_reads_and_grow_with_q(
    durations: list[float], elapsed: float
) -> None:
    """Property: `quantile` at 0.5 and 0.9 is the prediction's p50 and p90 (Lindy included,
    for a job that outlived them all), and higher quantiles are never shorter."""
    predictor = RuntimePredictor()
    for d in durations:
        predictor.observe(shape(), d)
    prediction = predictor.predict(shape(), elapsed)
    assert prediction is not None
    assert predictor.quantile(shape(), 0.5, elapsed) == prediction.p50_s
    assert predictor.quantile(shape(), 0.9, elapsed) == prediction.p90_s
    qs = [predictor.quantile(shape(), q, elapsed) for q in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99)]
    assert all(a is not None and b is not None and a <= b for a, b in pairwise(qs))


def test_spread_is_fixed_per_key_and_uniform_over_keys() -> None:
    values = [spread(f"job-{k:06d}") for k in range(4000)]
    assert values[:3] == [spread(f"job-{k:06d}") for k in range(3)]
    assert all(0.0 < v < 1.0 for v in values)
    for q in (0.1, 0.5, 0.9):  # the share below q is about q
        assert abs(sum(v < q for v in values) / len(values) - q) < 0.03
