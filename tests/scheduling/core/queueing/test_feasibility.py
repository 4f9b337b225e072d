"""Admission's feasibility (scheduling/core/queueing/feasibility.py) with the real framework, and
the pods-ready backoff (pods_ready.py): a flavor whose nodes could never host a pod set is
skipped or the workload is Inadmissible; the backoff doubles up to its cap."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from scheduling.core.queueing import admission as adm
from scheduling.core.queueing.admission import admission_cycle
from scheduling.core.queueing.feasibility import EmptyClusterFeasibility
from scheduling.core.queueing.pods_ready import WaitForPodsReady
from tests.builders import make_node, make_pod
from tests.scheduling.core.helpers import framework
from tests.scheduling.core.queueing.builders import FLAVORS, GPU, cq, wl

SINGLE_NUMA = make_pod("p").gpus(4).policy("single-numa-node").build()


def cluster(*, a100_cordoned: bool = False) -> EmptyClusterFeasibility:
    a100 = (
        make_node("a100-0")
        .topology("dgx-a100", model="A100")
        .labels(**{"nvidia.com/gpu.product": "A100"})
    )
    h100 = (
        make_node("h100-0")
        .topology("dgx-h100", model="H100")
        .labels(**{"nvidia.com/gpu.product": "H100"})
    )
    nodes = [(a100.cordon() if a100_cordoned else a100).build(), h100.build()]
    return EmptyClusterFeasibility(framework(), nodes)


def test_a_pod_no_node_of_the_flavor_can_host_is_blocked_with_the_filters_reason() -> None:
    feasibility = cluster()
    why = feasibility.blocker(SINGLE_NUMA, FLAVORS["a100"])
    assert why is not None and "flavor a100" in why and "single-numa-node" in why
    assert "0/2 nodes are available" in why
    assert feasibility.blocker(SINGLE_NUMA, FLAVORS["h100"]) is None
    assert feasibility.blocker(make_pod("q").gpus(4).build(), FLAVORS["a100"]) is None


def test_the_next_flavor_is_tried_and_none_left_is_inadmissible() -> None:
    vision = replace(wl("vision", "a", 4), pod_sets=(("main", SINGLE_NUMA),))
    both = admission_cycle(
        [cq("a", {"a100": 20, "h100": 8})], FLAVORS, [vision], [], feasibility=cluster()
    )
    assert dict(both.admitted[0].assignment.flavors) == {GPU: "h100"}
    only_a100 = admission_cycle(
        [cq("a", {"a100": 20})], FLAVORS, [vision], [], feasibility=cluster()
    )
    assert not only_a100.admitted
    waiting = only_a100.waiting["vision"]
    assert waiting.reason == adm.INADMISSIBLE and "pod set main" in waiting.message


def test_a_larger_workload_of_hostable_pods_is_not_refused_by_an_earlier_infeasible_one() -> None:
    """The per-queue failure memory must not carry an infeasibility to a workload asking more
    quota of pods that fit."""
    vision = replace(wl("vision", "a", 4, created=0), pod_sets=(("main", SINGLE_NUMA),))
    plain = make_pod("q").gpus(4).build()
    bigger = replace(wl("bigger", "a", 8, created=1), pod_sets=(("main", plain),))
    result = admission_cycle(
        [cq("a", {"a100": 20})], FLAVORS, [vision, bigger], [], feasibility=cluster()
    )
    assert [a.workload.key for a in result.admitted] == ["bigger"]


def test_cordoned_nodes_cannot_host() -> None:
    why = cluster(a100_cordoned=True).blocker(make_pod("q").gpus(1).build(), FLAVORS["a100"])
    assert why is not None


def test_a_workload_backing_off_waits_until_its_requeue_time() -> None:
    backing = replace(wl("w", "a", 1), requeue_at=100.0)
    early = admission_cycle([cq("a", {"h100": 8})], FLAVORS, [backing], [], now=50.0)
    assert not early.admitted and early.waiting["w"].reason == adm.PODS_READY_TIMEOUT
    late = admission_cycle([cq("a", {"h100": 8})], FLAVORS, [backing], [], now=100.0)
    assert [a.workload.key for a in late.admitted] == ["w"]


@given(st.integers(min_value=1, max_value=10_000))
def test_the_backoff_doubles_and_is_capped(count: int) -> None:
    policy = WaitForPodsReady(timeout_s=300, backoff_base_s=60, backoff_max_s=3600)
    delay = policy.requeue_delay(count)
    assert 60 <= delay <= 3600
    assert policy.requeue_delay(count + 1) == min(3600, 2 * delay)
    assert policy.requeue_delay(1) == 60


def test_the_timeout_counts_from_admission_and_zero_turns_it_off() -> None:
    policy = WaitForPodsReady(timeout_s=300)
    assert not policy.timed_out(1000, 1299) and policy.timed_out(1000, 1300)
    assert not WaitForPodsReady(timeout_s=0).timed_out(0, 10**9)
