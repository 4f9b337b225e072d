"""The cache kept current from the outbox always equals a snapshot rebuilt from the database."""

import gc
import weakref
from dataclasses import replace

import numpy as np
import pytest
from django.utils import timezone

from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot, OverCommitError
from scheduling.models import Node, Pod
from scheduling.profile_files import load_profile
from scheduling.worker import cluster_state
from scheduling.worker.cache import ClusterCache
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]
COLUMNS = ("cpu_free", "memory_free", "numa_cpu_free", "gpu_free", "full_free_mask", "mig_free")


def assert_same_as_fresh(cache: ClusterCache) -> None:
    cached, fresh = cache.state().snapshot, cluster_state.cluster_state().snapshot
    for column in COLUMNS:
        assert np.array_equal(getattr(cached, column), getattr(fresh, column)), column


def test_cache_follows_binds_releases_and_foreign_binds() -> None:
    factories.nodes(3)
    owner = factories.tenant()
    factories.workload(owner, "a", pods=4, gpus=2)
    factories.workload(owner, "b", pods=6, gpu_milli=300)
    ours = database_cycle(Framework(load_profile("topology")), identity="ours")
    ours.run_once()
    assert_same_as_fresh(ours.cache)
    rebuilds = ours.cache.rebuilds

    # The simulator finishes some pods: releases arrive through the outbox.
    done = list(Pod.objects.filter(workload__name="a").select_related("workload__tenant")[:2])
    services.pods_finish(pods=done, now=timezone.now())
    assert_same_as_fresh(ours.cache)

    # Another scheduler (its own lease) binds pods we never saw.
    factories.workload(owner, "c", pods=3, gpus=1)
    database_cycle(
        Framework(load_profile("topology")), identity="other", lease_name="other"
    ).run_once()
    assert_same_as_fresh(ours.cache)
    assert ours.cache.rebuilds == rebuilds  # all of it incremental


def test_a_cordon_is_applied_in_place_and_any_other_node_change_rebuilds() -> None:
    (node,) = factories.nodes(1)
    cache = ClusterCache()
    nodes = cache.state().snapshot.nodes
    services.node_set_cordoned(node=node, cordoned=True)
    snapshot = cache.state().snapshot
    assert snapshot.cordoned.tolist() == [True] and snapshot.nodes[0].cordoned
    assert snapshot.nodes is not nodes  # what was built from the old list can tell
    assert cache.rebuilds == 1
    assert_same_as_fresh(cache)

    spec = cluster_state.node_spec(node, list(node.gpus.all()), None)
    services.node_register(
        spec=replace(spec, labels={"pool": "serve"}), source=Node.Source.SIMULATOR
    )
    assert cache.state().snapshot.nodes[0].labels == {"pool": "serve"}
    assert cache.rebuilds == 2


def test_events_the_snapshot_cannot_take_rebuild_it_instead_of_failing(monkeypatch) -> None:
    factories.nodes(2)
    owner = factories.tenant()
    ours = database_cycle(Framework(load_profile("topology")), identity="ours")
    ours.run_once()
    factories.workload(owner, "c", pods=3, gpus=1)
    database_cycle(
        Framework(load_profile("topology")), identity="other", lease_name="other"
    ).run_once()

    def refuse(self, pod, placement):  # as a promotion read before its lender's release
        raise OverCommitError(f"pod {pod.uid} does not fit on {placement.node} any more")

    with monkeypatch.context() as patched:
        patched.setattr(ClusterSnapshot, "assume", refuse)
        ours.cache.catch_up()  # the cycle calls this mid-commit: it must not raise
    rebuilds = ours.cache.rebuilds
    assert_same_as_fresh(ours.cache)
    assert ours.cache.rebuilds == rebuilds + 1


def test_a_freezing_cache_keeps_its_state_from_the_collector_and_frees_a_replaced_one() -> None:
    factories.nodes(2)
    cache = ClusterCache(freeze_long_lived=True)
    try:
        first = cache.state()
        assert gc.isenabled()  # paused for the build only
        assert gc.get_freeze_count() > 0
        assert all(tracked is not first for tracked in gc.get_objects())  # frozen
        # A cycle through the replaced state: only the collector can free it.
        first.snapshot.cycle = first  # type: ignore[attr-defined]
        replaced = weakref.ref(first)
        del first
        cache.invalidate()
        second = cache.state()
        assert replaced() is None
        assert second is cache.state()
        # What a cycle leaves behind joins the frozen state (the pods it placed).
        kept = [second]
        cache.freeze_kept()
        assert all(tracked is not kept for tracked in gc.get_objects())
    finally:
        gc.unfreeze()
