"""scheduling.services.observed: a pod's allocation moved onto the GPUs it really holds, with its
event; swaps in one batch; refusals with the reason; the cache rebuilds on the event."""

from __future__ import annotations

import pytest
from django.db.models import Sum
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import services
from scheduling.models import Event, Gpu, GpuAssignment, Pod
from scheduling.worker.cache import ClusterCache
from tests.scheduling import factories
from tests.scheduling.test_services import schedule_pending

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def placed(*sizes: int) -> list[Pod]:
    factories.nodes(1)
    owner = factories.tenant()
    for k, gpus in enumerate(sizes):
        factories.workload(owner, f"w{k}", gpus=gpus)
    cluster, decisions = schedule_pending()
    services.placements_commit(cluster=cluster, placed=decisions, scheduler="s", now=timezone.now())
    return [Pod.objects.get(workload__name=f"w{k}") for k in range(len(sizes))]


def held(pod: Pod) -> list[int]:
    rows = GpuAssignment.objects.filter(allocation__pod=pod, active=True)
    return sorted(rows.values_list("gpu__index", flat=True))


def test_two_pods_recorded_on_each_others_gpus_swap_and_the_cache_follows() -> None:
    a, b = placed(2, 2)
    cache = ClusterCache()
    cache.state()
    ga, gb = held(a), held(b)
    result = services.gpus_observe(observed={a: gb, b: ga}, source="dcgm")
    assert set(result.corrected) == {str(a.uid), str(b.uid)} and not result.refused
    assert (held(a), held(b)) == (gb, ga)
    assert Event.objects.filter(type="allocation.gpus_observed").count() == 2
    assert Gpu.objects.aggregate(used=Sum("used_milli"))["used"] == 4000
    rebuilds = cache.rebuilds
    cache.state()
    assert cache.rebuilds == rebuilds + 1


def test_corrections_that_cannot_be_true_are_refused_with_the_reason() -> None:
    a, b = placed(2, 2)
    free = sorted(set(range(8)) - set(held(a)) - set(held(b)))
    result = services.gpus_observe(
        observed={a: [free[0]], b: [held(a)[0], free[0]]},  # too few; a GPU of a (not moving)
        source="dcgm",
    )
    assert result.refused[str(a.uid)] == "observed on 1 GPUs, holds 2"
    assert "is held by pod" in result.refused[str(b.uid)]
    assert (
        services.gpus_observe(observed={a: [free[0], 99]}, source="dcgm")
        .refused[str(a.uid)]
        .endswith("has no GPU 99")
    )
    assert not Event.objects.filter(type="allocation.gpus_observed").exists()


def test_a_move_onto_gpus_whose_holder_cannot_move_is_refused_too() -> None:
    # a wants b's GPUs, b wants c's, c is not corrected: b stays, so a must stay too.
    a, b, c = placed(2, 2, 2)
    result = services.gpus_observe(observed={a: held(b), b: held(c)}, source="dcgm")
    assert not result.corrected
    assert f"held by pod {c.name}" in result.refused[str(b.uid)]
    assert f"held by pod {b.name}" in result.refused[str(a.uid)]
    assert Gpu.objects.aggregate(used=Sum("used_milli"))["used"] == 6000


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(st.lists(st.integers(0, 7), min_size=1, max_size=3), min_size=4, max_size=4))
def test_any_observation_applies_or_refuses_and_never_overcommits(seen: list[list[int]]) -> None:
    # Five of the eight GPUs held; each pod observed on arbitrary GPUs (other pods' included).
    if not Pod.objects.exists():
        placed(2, 1, 1, 1)
    pods = [Pod.objects.get(workload__name=f"w{k}") for k in range(4)]
    result = services.gpus_observe(observed=dict(zip(pods, seen, strict=True)), source="dcgm")
    assert set(result.corrected) | set(result.refused) <= {str(p.uid) for p in pods}
    holders = [i for p in pods for i in held(p)]
    assert len(holders) == len(set(holders)) == 5
    used = dict(Gpu.objects.values_list("index", "used_milli"))
    assert used == {i: 1000 if i in holders else 0 for i in range(8)}


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.permutations(range(8)))
def test_any_observed_layout_keeps_one_holder_per_gpu_and_true_counters(order: list[int]) -> None:
    # The examples share the test's database: the pods are placed once, then moved from one
    # layout to the next.
    if not Pod.objects.exists():
        placed(3, 2, 2, 1)
    pods = [Pod.objects.get(workload__name=f"w{k}") for k in range(4)]
    observed, start = {}, 0
    for pod in pods:
        size = len(held(pod))
        observed[pod] = sorted(order[start : start + size])
        start += size
    result = services.gpus_observe(observed=observed, source="dcgm")
    assert not result.refused
    assert [held(p) for p in pods] == [observed[p] for p in pods]
    used = dict(Gpu.objects.values_list("index", "used_milli"))
    assert used == {i: 1000 for i in range(8)}
