"""Reclaim through the database: lent shares are counted apart from what owners hold, promoted to
free capacity when their lenders leave, and evicted in simulated time when the owners' use comes
back and stays back for the grace period."""

import pytest

from bench.experiments.worlds import SimClock as Clock
from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.types import ServiceClass
from scheduling.models import Allocation, Event, Gpu, GpuAssignment, Pod
from scheduling.profile_files import load_profile
from scheduling.worker import cluster_state
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from scheduling.worker.reclaim import ReclaimFeed
from telemetry.models import GpuLatest
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
NODE = "t4-2gpu-0000"


def measure(clock: Clock, busy: float) -> None:
    """DCGM reads both GPUs of the node at `busy`, now."""
    GpuLatest.objects.all().delete()
    GpuLatest.objects.bulk_create(
        GpuLatest(node=NODE, gpu_index=g, uuid=f"{NODE}-{g}", busy=busy, sampled_at=clock.now)
        for g in range(2)
    )


def worker(clock: Clock) -> SchedulingCycle:
    return database_cycle(
        Framework(load_profile("gpusched")),
        clock=clock,
        reclaim_feed=ReclaimFeed(refresh_every_s=0.0),
    )


def owner_holding_the_node(clock: Clock) -> SchedulingCycle:
    """A batch tenant holds both GPUs whole and has been measured idle for 10 minutes."""
    factories.nodes(1, topology="t4-2gpu")
    factories.workload(factories.tenant("nlp"), "owner", gpus=2)
    run = worker(clock)
    run.run_once()
    clock.advance(600)
    measure(clock, busy=0.1)
    return run


def opportunistic(name: str, milli: int = 500) -> None:
    factories.workload(
        factories.tenant("research"),
        name,
        gpu_milli=milli,
        service_class=ServiceClass.OPPORTUNISTIC,
    )


def lent_pod(name: str) -> GpuAssignment:
    return GpuAssignment.objects.get(active=True, allocation__pod__workload__name=name)


def test_an_opportunistic_share_is_lent_idle_capacity_and_counted_apart() -> None:
    clock = Clock()
    run = owner_holding_the_node(clock)
    opportunistic("sweep")
    run.run_once()
    assignment = lent_pod("sweep")
    assert assignment.reclaimed
    gpu = Gpu.objects.get(pk=assignment.gpu_id)
    assert (gpu.used_milli, gpu.lent_milli) == (1000, 500)  # the owner keeps its whole GPU
    bound = Event.objects.filter(type="pod.bound", payload__name__startswith="sweep").get()
    assert bound.payload["reclaimed"] is True
    # A rebuilt snapshot agrees with the incremental one.
    fresh = cluster_state.cluster_state().snapshot
    assert fresh.gpu_lent.tolist() == run.cache.state().snapshot.gpu_lent.tolist()


def test_reclaimed_capacity_is_handed_back_after_the_grace_period() -> None:
    clock = Clock()
    run = owner_holding_the_node(clock)
    opportunistic("sweep")
    run.run_once()
    gpu = lent_pod("sweep").gpu_id

    # The owner's job starts working: DCGM sees the GPU (owner + lent pod) fully busy.
    clock.advance(30)
    measure(clock, busy=1.0)
    assert run.run_once().reclaimed == 0  # over-lent, but within the grace period
    clock.advance(60)
    measure(clock, busy=1.0)
    assert run.run_once().reclaimed == 0
    clock.advance(61)
    measure(clock, busy=1.0)
    assert run.run_once().reclaimed == 1

    pod = Pod.objects.get(workload__name="sweep")
    assert pod.phase == Pod.Phase.PENDING
    assert Gpu.objects.get(pk=gpu).lent_milli == 0
    evicted = Event.objects.get(type="workload.evicted")
    assert evicted.payload["reason"].startswith(f"Reclaimed: GPU {NODE}/gpu")
    assert "the owners' use came back" in evicted.payload["reason"]
    # Nothing is lendable any more: the evicted sweep waits instead of coming straight back.
    assert Pod.objects.get(workload__name="sweep").phase == Pod.Phase.PENDING
    assert Allocation.objects.filter(pod__workload__name="owner", active=True).exists()


def test_a_short_burst_of_the_owner_evicts_nobody() -> None:
    clock = Clock()
    run = owner_holding_the_node(clock)
    opportunistic("sweep")
    run.run_once()
    clock.advance(30)
    measure(clock, busy=1.0)
    run.run_once()
    for _ in range(5):  # the owner calms down again; minutes pass
        clock.advance(60)
        measure(clock, busy=0.1)
        assert run.run_once().reclaimed == 0
    assert lent_pod("sweep").reclaimed


def test_batch_pods_do_not_borrow() -> None:
    """(Online pods do not either, and may preempt batch owners instead: core tests.)"""
    clock = Clock()
    run = owner_holding_the_node(clock)
    factories.workload(factories.tenant("inference"), "serve", gpu_milli=250)
    run.run_once()
    assert not GpuAssignment.objects.filter(allocation__pod__workload__name="serve").exists()
    assert Pod.objects.get(workload__name="serve").phase == Pod.Phase.PENDING


def test_when_the_lenders_leave_a_lent_share_moves_onto_free_capacity() -> None:
    clock = Clock()
    run = owner_holding_the_node(clock)
    opportunistic("sweep", milli=300)
    run.run_once()
    gpu = lent_pod("sweep").gpu_id
    uid = str(lent_pod("sweep").allocation.pod.uid)
    placed_as = run.cache.state().snapshot.pods.held[uid].sequence
    owner = list(Pod.objects.filter(workload__name="owner"))
    services.pods_start(pods=owner, now=clock.now)
    services.pods_finish(pods=owner, now=clock.now)

    assignment = lent_pod("sweep")
    assert not assignment.reclaimed
    row = Gpu.objects.get(pk=gpu)
    assert (row.used_milli, row.lent_milli) == (300, 0)
    promoted = Event.objects.get(type="allocation.promoted")
    assert promoted.payload["node"] == NODE
    # The outbox-fed cache follows the promotion and equals a rebuilt snapshot.
    state = run.cache.state()
    fresh = cluster_state.cluster_state().snapshot
    assert state.snapshot.gpu_free.tolist() == fresh.gpu_free.tolist()
    assert state.snapshot.gpu_lent.tolist() == fresh.gpu_lent.tolist()
    assert not fresh.gpu_lent.any()
    assert state.held[uid][1].reclaimed is False
    # Promoted, not restarted: preemption still sees it as the pod placed back then.
    assert state.snapshot.pods.held[uid].sequence == placed_as
