"""Run-time prediction from finished jobs: the most specific group with enough samples speaks,
its basis says which, a running job is predicted from the similar jobs that ran longer, and
within a group the jobs that finished recently weigh more than the older history."""

from __future__ import annotations

import random
from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.queueing.runtime import (
    JobShape,
    Prior,
    RuntimePredictor,
    name_pattern,
    spread,
)


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
        predictor.observe(shape(name=f"train-{k:03d}"), 600.0, finished_at=k)
    for k in range(10):
        predictor.observe(shape(name=f"eval-{k}"), 60.0, finished_at=k)
    train = predictor.predict(shape(name="train-777"))
    assert train is not None and train.p50_s == 600.0
    assert train.basis.startswith("p50 of 3 similar jobs") and "name train" in train.basis
    other = predictor.predict(shape(name="new-job"))  # no such name: the tenant and shape
    assert other is not None and other.samples == 13 and "name" not in other.basis
    stranger = predictor.predict(shape(tenant="nlp", gpus=1, name="x"))
    assert stranger is not None and "(all tenants)" in stranger.basis


def test_only_a_group_of_the_tenant_s_own_jobs_with_enough_samples_is_tenant_specific() -> None:
    """What the product lets replace a prior (issue 37): another tenant's jobs, or fewer than
    min_samples of the tenant's own, answer but are not the tenant's own evidence."""
    predictor = RuntimePredictor(min_samples=3)
    for k in range(3):
        predictor.observe(shape(tenant="nlp", name=f"eval-{k}", gpus=1), 60.0, finished_at=k)
    predictor.observe(shape(name="train-000"), 600.0, finished_at=3)
    one = predictor.predict(shape(name="train-001"))
    assert one is not None and not one.tenant_specific and "(all tenants)" in one.basis
    stranger = predictor.predict(shape(tenant="speech", gpus=8))
    assert stranger is not None and not stranger.tenant_specific
    for k in range(1, 3):
        predictor.observe(shape(name=f"train-{k:03d}"), 600.0, finished_at=3 + k)
    own = predictor.predict(shape(name="train-003"))
    assert own is not None and own.tenant_specific and own.p50_s == 600.0
    assert "tenant vision" in own.basis


def test_a_running_job_is_predicted_from_those_that_ran_longer() -> None:
    predictor = RuntimePredictor(min_samples=2)
    for duration in (100.0, 200.0, 1000.0, 1200.0):
        predictor.observe(shape(), duration, finished_at=0.0)
    running = predictor.predict(shape(), elapsed_s=500.0)
    assert running is not None and running.p50_s == 1100.0
    assert "ran longer" in running.basis
    outlived = predictor.predict(shape(), elapsed_s=5000.0)
    assert outlived is not None and outlived.p50_s == 10_000.0 and outlived.p90_s == 50_000.0


def test_a_burst_s_first_finished_jobs_outweigh_the_older_history() -> None:
    """200 jobs of an hour finished two days ago; the burst of today runs ten minutes: its first
    10 finished jobs set the prediction, where the plain median over the group would not."""
    weighted, plain = RuntimePredictor(), RuntimePredictor(half_life_s=None)
    for predictor in (weighted, plain):
        for k in range(200):
            predictor.observe(shape(), 3600.0, finished_at=k * 60.0)
        for k in range(10):
            predictor.observe(shape(), 600.0, finished_at=2 * 86400.0 + k * 60.0)
    burst = weighted.predict(shape())
    assert burst is not None and burst.p50_s == 600.0 and burst.samples == 210
    assert burst.basis.startswith("p50 of 210 similar jobs") and "halves every 1 h" in burst.basis
    history = plain.predict(shape())
    assert history is not None and history.p50_s == 3600.0 and "halves" not in history.basis


def test_jobs_of_the_same_age_weigh_the_same() -> None:
    predictor = RuntimePredictor()
    for duration in (1.0, 2.0, 3.0, 4.0, 5.0, 6.0):
        predictor.observe(shape(), duration, finished_at=50.0)
    assert predictor.quantile(shape(), 0.5) == 3.5
    assert predictor.quantile(shape(), 0.01) == 1.0  # held at the ends
    assert predictor.quantile(shape(), 0.99) == 6.0


finish_times = st.floats(min_value=-1e6, max_value=1e6)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(min_value=0, max_value=1e6), finish_times), min_size=1, max_size=60
    )
)
def test_quantiles_lie_within_what_was_seen_and_p50_le_p90(
    jobs: list[tuple[float, float]],
) -> None:
    predictor = RuntimePredictor()
    for d, at in jobs:
        predictor.observe(shape(), d, finished_at=at)
    p = predictor.predict(shape())
    assert p is not None
    durations = [d for d, _ in jobs]
    assert min(durations) <= p.p50_s <= p.p90_s <= max(durations)


@settings(max_examples=40, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.floats(min_value=1, max_value=1e5), st.integers(0, 1000)),
        min_size=5,
        max_size=40,
    ),
    shift=st.integers(-(10**6), 10**6),
    seed=st.randoms(use_true_random=False),
    q=st.floats(min_value=0.01, max_value=0.99),
)
def test_weights_depend_only_on_age_not_on_order_or_clock(
    jobs: list[tuple[float, int]], shift: int, seed: random.Random, q: float
) -> None:
    """Property: the same finished jobs, observed in another order or with every finish time
    moved by the same amount, predict the same; and finishing at the same time is no weighting."""
    first, second = RuntimePredictor(), RuntimePredictor()
    for d, at in jobs:
        first.observe(shape(), d, finished_at=float(at))
    shuffled = list(jobs)
    seed.shuffle(shuffled)
    for d, at in shuffled:
        second.observe(shape(), d, finished_at=float(at + shift))
    assert first.quantile(shape(), q) == pytest.approx(second.quantile(shape(), q), rel=1e-9)
    same_time, unweighted = RuntimePredictor(), RuntimePredictor(half_life_s=None)
    for d, _ in jobs:
        same_time.observe(shape(), d, finished_at=7.0)
        unweighted.observe(shape(), d, finished_at=float(seed.randint(0, 10**6)))
    assert same_time.quantile(shape(), q) == pytest.approx(unweighted.quantile(shape(), q))


@settings(max_examples=30, deadline=None)
@given(
    jobs=st.lists(
        st.tuples(st.floats(min_value=1, max_value=1e6), finish_times), min_size=5, max_size=40
    ),
    elapsed=st.floats(min_value=0, max_value=2e6),
)
def test_quantiles_are_those_the_prediction_reads_and_grow_with_q(
    jobs: list[tuple[float, float]], elapsed: float
) -> None:
    """Property: `quantile` at 0.5 and 0.9 is the prediction's p50 and p90 (Lindy included,
    for a job that outlived them all), and higher quantiles are never shorter."""
    predictor = RuntimePredictor()
    for d, at in jobs:
        predictor.observe(shape(), d, finished_at=at)
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


def test_a_prior_stands_until_outlived_unless_it_is_a_bound() -> None:
    """A queue's default run time, outlived, leaves what is left to the Lindy estimate; a
    declared limit is where the job is stopped, so it stays the prediction."""
    default = Prior(600.0, "queue default")
    assert default.prediction(100.0).p50_s == 600.0
    assert default.prediction().basis == "prior: queue default"
    outlived = default.prediction(900.0)
    assert (outlived.p50_s, outlived.p90_s) == (1800.0, 9000.0)
    assert "outlived" in outlived.basis
    limit = Prior(600.0, "declared limit", bound=True)
    assert limit.prediction(900.0).p50_s == limit.prediction(900.0).p90_s == 600.0


@given(st.floats(1.0, 1e6), st.floats(0.0, 1e7))
def test_a_prior_never_predicts_less_than_what_ran_unless_bounded(seconds, elapsed) -> None:
    p = Prior(seconds, "queue default").prediction(elapsed)
    assert p.p50_s >= elapsed and p.p90_s >= p.p50_s
