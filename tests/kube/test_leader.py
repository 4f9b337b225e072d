"""Leader election on a coordination.k8s.io/v1 Lease against the fake API server: two replicas
never both bind, a standby takes over an expired lease, a replica that lost it stops."""

from __future__ import annotations

import pytest
from kubernetes.client import CoordinationV1Api

from kube.leader import LeaseElector, LeaseLost
from kube.models import KubePod
from sim.kubernetes.meta import MICRO_TIME
from sim.kubernetes.simulated import SimulatedKubernetes
from tests.kube import objects
from tests.kube.helpers import Clock, elector_of, scheduler


def elector(fake: SimulatedKubernetes, identity: str, clock: Clock) -> LeaseElector:
    return LeaseElector(
        CoordinationV1Api(fake.api_client()),
        name="gpusched-scheduler",
        namespace="gpu-system",
        identity=identity,
        clock=clock.now,
        monotonic=clock.monotonic,
    )


def test_first_candidate_creates_the_lease_the_second_waits(fake: SimulatedKubernetes) -> None:
    clock = Clock()
    a, b = elector(fake, "a", clock), elector(fake, "b", clock)
    assert a.try_acquire_or_renew() and a.leading()
    assert not b.try_acquire_or_renew() and not b.leading()
    lease = fake.leases["gpu-system/gpusched-scheduler"]
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    # Whole-second clock: microsecond 0, which isoformat() would print without a fraction.
    assert lease["spec"]["renewTime"] == "2026-01-01T00:16:40.000000Z"
    assert MICRO_TIME.match(lease["spec"]["acquireTime"])
    methods = [(m, p.split("?")[0]) for m, p in fake.requests]
    assert ("POST", "/apis/coordination.k8s.io/v1/namespaces/gpu-system/leases") in methods


def test_renewal_replaces_with_the_resource_version_read(fake: SimulatedKubernetes) -> None:
    clock = Clock()
    a = elector(fake, "a", clock)
    a.try_acquire_or_renew()
    first = fake.leases["gpu-system/gpusched-scheduler"]["metadata"]["resourceVersion"]
    clock.advance(2)
    assert a.try_acquire_or_renew()
    lease = fake.leases["gpu-system/gpusched-scheduler"]
    assert int(lease["metadata"]["resourceVersion"]) > int(first)
    assert lease["spec"]["renewTime"] == "2026-01-01T00:16:42.000000Z"
    assert lease["spec"]["leaseTransitions"] == 0


def test_a_standby_takes_over_only_after_the_lease_duration(fake: SimulatedKubernetes) -> None:
    clock_a, clock_b = Clock(), Clock()
    a, b = elector(fake, "a", clock_a), elector(fake, "b", clock_b)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    clock_b.advance(10)
    assert not b.try_acquire_or_renew()  # the record has not changed for 10 s only
    clock_b.advance(6)
    assert b.try_acquire_or_renew()  # unchanged for 16 s > 15 s: a is gone
    lease = fake.leases["gpu-system/gpusched-scheduler"]
    assert lease["spec"]["holderIdentity"] == "b" and lease["spec"]["leaseTransitions"] == 1
    # a wakes up: the lease names b, so a has lost it and says so.
    clock_a.advance(16)
    assert not a.try_acquire_or_renew()
    assert a.lost and not a.leading()


def test_a_conflicting_replace_means_the_lease_is_lost(fake: SimulatedKubernetes) -> None:
    clock = Clock()
    a = elector(fake, "a", clock)
    a.try_acquire_or_renew()
    # Someone else writes the lease between our read and our replace.
    real_read = a.api.read_namespaced_lease

    def stale_read(*args, **kwargs):
        result = real_read(*args, **kwargs)
        fake.update_object("leases", "gpu-system", "gpusched-scheduler", lambda lease: None)
        return result

    a.api.read_namespaced_lease = stale_read  # type: ignore[method-assign]
    assert not a.try_acquire_or_renew()
    assert a.lost


def test_release_lets_a_standby_take_over_at_once(fake: SimulatedKubernetes) -> None:
    clock = Clock()
    a, b = elector(fake, "a", clock), elector(fake, "b", clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    a.release()
    assert fake.leases["gpu-system/gpusched-scheduler"]["spec"]["holderIdentity"] == ""
    assert b.try_acquire_or_renew()


@pytest.mark.django_db
def test_two_scheduler_replicas_never_both_bind_and_the_loser_stops(
    fake: SimulatedKubernetes,
) -> None:
    fake.add_node(objects.node("gpu-a"))
    fake.add_node(objects.node("gpu-b"))
    clock_a, clock_b = Clock(), Clock()
    a = scheduler(fake, "replica-a", clock=clock_a)
    b = scheduler(fake, "replica-b", clock=clock_b)

    fake.add_pod(objects.pod("p1", gpus=2))
    assert a.run_once().bound == 1
    fake.add_pod(objects.pod("p2", gpus=2))
    report_b = b.run_once()
    assert not report_b.leading and report_b.bound == 0  # the standby binds nothing
    assert a.run_once().bound == 1

    # a stops renewing (paused); after the lease duration b takes over and binds.
    fake.add_pod(objects.pod("p3", gpus=2))
    b.run_once()
    clock_b.advance(16)
    report_b = b.run_once()
    assert report_b.leading and report_b.bound == 1

    # a resumes: it sees b's lease, stops, and binds nothing more.
    fake.add_pod(objects.pod("p4", gpus=2))
    clock_a.advance(16)
    with pytest.raises(LeaseLost):
        a.run_once()
    assert fake.pod("ml-team", "p4")["spec"].get("nodeName") is None
    assert b.run_once().bound == 1

    scheduled = [e for e in fake.events if e["reason"] == "Scheduled"]
    by = {e["regarding"]["name"]: e["reportingInstance"] for e in scheduled}
    assert by == {"p1": "replica-a", "p2": "replica-a", "p3": "replica-b", "p4": "replica-b"}
    assert len(fake.bindings) == 4  # each pod bound exactly once
    assert KubePod.objects.filter(owned=True).count() == 4


@pytest.mark.django_db
def test_a_leader_past_its_renew_deadline_does_not_bind(fake: SimulatedKubernetes) -> None:
    fake.add_node(objects.node("gpu-a"))
    clock = Clock()
    a = scheduler(fake, "replica-a", clock=clock)
    a.run_once()
    fake.add_pod(objects.pod("late", gpus=1))

    # The API server stops answering lease calls; the renew deadline passes.
    elector_of(a).api = _Unreachable()  # type: ignore[assignment]
    clock.advance(11)
    with pytest.raises(LeaseLost):
        a.run_once()
    assert not fake.bindings


class _Unreachable:
    def read_namespaced_lease(self, *args: object, **kwargs: object) -> None:
        raise ConnectionError("API server unreachable")
