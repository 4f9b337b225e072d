"""Admission never reserves quota that cannot be used (issue 18), on the database side: a flavor
none of whose nodes could ever host a pod set is skipped (the next flavor, else Inadmissible with
the reason), and an admitted workload whose pods are not placed within the pods-ready timeout is
evicted back to its queue with its quota released and requeued with exponential backoff."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml

from bench.experiments.worlds import SimClock as Clock
from scheduling import services
from scheduling.core.queueing.admission import INADMISSIBLE, PODS_READY_TIMEOUT
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.queueing.pods_ready import WaitForPodsReady
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources, TopologyPolicy
from scheduling.models import Node, Pod, Workload
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.selectors import queues as selectors
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def worker(clock: Clock, timeout_s: float = 300.0) -> SchedulingCycle:
    return database_cycle(
        Framework(load_profile("topology")),
        identity="w1",
        clock=clock,
        pods_ready=WaitForPodsReady(timeout_s=timeout_s, backoff_base_s=60, backoff_max_s=3600),
    )


def register(count: int, preset: str) -> None:
    for spec in build_nodes(synthetic_pools(count, preset)):
        services.node_register(spec=spec, source=Node.Source.SIMULATOR)


def cluster_queue(flavors: list[tuple[str, int]]) -> None:
    """ClusterQueue `vision` over the given (flavor, GPUs) in order, LocalQueue vision/default."""
    entries = "".join(
        f"    - name: {name}\n      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]\n"
        for name, gpus in flavors
    )
    docs = [
        f"kind: ResourceFlavor\nmetadata: {{name: h100}}\n"
        f"spec: {{nodeLabels: {{nvidia.com/gpu.product: {H100}}}}}",
        f"kind: ResourceFlavor\nmetadata: {{name: a100}}\n"
        f"spec: {{nodeLabels: {{nvidia.com/gpu.product: {A100}}}}}",
        "kind: ClusterQueue\nmetadata: {name: vision}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n" + entries,
        "kind: LocalQueue\nmetadata: {name: default, namespace: vision}\n"
        "spec: {clusterQueue: vision}",
    ]
    text = "\n---\n".join(docs)
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(text))))


def submit(name: str, gpus: int = 4, policy: TopologyPolicy | None = None) -> Workload:
    template = PodTemplate(
        resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=gpus), topology_policy=policy
    )
    return services.workload_submit(
        tenant=factories.tenant("vision"),
        name=name,
        pod_sets=[services.PodSetSpec("main", 1, template)],
    )


def test_dgx_a100_nodes_have_two_gpus_per_numa_node() -> None:
    (node, *_) = build_nodes(synthetic_pools(1, "dgx-a100"))
    assert node.gpu_model == A100 and len(node.gpus) == 8
    numa = node.shape.gpu_numa
    assert max(numa.count(k) for k in set(numa)) == 2


def test_single_numa_workloads_are_never_admitted_to_a_flavor_whose_nodes_cannot_host_them() -> (
    None
):
    """The issue's deadlock: five 4-GPU single-numa-node workloads and an a100 flavor whose nodes
    have 2 GPUs per NUMA node. None is admitted there, no quota is held, and each says why."""
    register(2, "dgx-a100")
    cluster_queue([("a100", 20)])
    vision = [submit(f"vision-{k}", policy=TopologyPolicy.SINGLE_NUMA_NODE) for k in range(5)]
    other = submit("fits", gpus=4)  # no policy: 4 GPUs fit on an a100 node
    clock = Clock()
    w = worker(clock)
    for _ in range(3):
        w.run_once()
        clock.advance(10)
    rows = {x.name: x for x in Workload.objects.all()}
    for workload in vision:
        row = rows[workload.name]
        assert row.state == Workload.State.PENDING and row.cluster_queue is None
        assert row.pending_reason == INADMISSIBLE
        assert "flavor a100" in row.reason and "single-numa-node" in row.reason
        assert "pod set main" in row.reason
    assert rows[other.name].state in (Workload.State.ADMITTED, Workload.State.RUNNING)
    (status,) = selectors.cluster_queue_status()
    (flavor, (usage,)) = status.flavors_usage[0]
    assert flavor == "a100" and usage.total == "4"  # only the workload that can run holds quota


def test_the_next_flavor_that_can_host_the_pods_is_chosen() -> None:
    register(1, "dgx-a100")
    register(1, "dgx-h100")  # 4 GPUs per NUMA node
    cluster_queue([("a100", 16), ("h100", 8)])
    workload = submit("vision-0", policy=TopologyPolicy.SINGLE_NUMA_NODE)
    clock = Clock()
    worker(clock).run_once()
    workload.refresh_from_db()
    assert workload.state in (Workload.State.ADMITTED, Workload.State.RUNNING)
    assert workload.flavors == {"nvidia.com/gpu": "h100"}
    assert Pod.objects.filter(workload=workload, phase__in=Pod.PLACED_PHASES).count() == 1


def test_a_flavor_whose_nodes_are_all_cordoned_is_not_chosen_until_one_is_uncordoned() -> None:
    register(1, "dgx-h100")
    cluster_queue([("h100", 8)])
    node = services.node_set_cordoned(node=Node.objects.get(), cordoned=True)
    workload = submit("vision-0")
    clock = Clock()
    w = worker(clock)
    w.run_once()
    workload.refresh_from_db()
    assert workload.state == Workload.State.PENDING and workload.pending_reason == INADMISSIBLE
    assert "cordon" in workload.reason.lower() or "unschedulable" in workload.reason.lower()
    services.node_set_cordoned(node=node, cordoned=False)
    clock.advance(5)
    w.run_once()
    workload.refresh_from_db()
    assert workload.state in (Workload.State.ADMITTED, Workload.State.RUNNING)


def test_an_admitted_workload_that_cannot_be_placed_is_requeued_with_its_quota_released() -> None:
    """Quota (16) beyond the one 8-GPU node: the second 8-GPU workload is admitted but cannot be
    placed while the first runs. After the timeout it gives its quota back (Evicted,
    PodsReadyTimeout), waits out a 60 s backoff, is admitted again, and the next timeout doubles
    the backoff."""
    register(1, "dgx-h100")
    cluster_queue([("h100", 16)])
    first = submit("first", gpus=8)
    clock = Clock()
    w = worker(clock)
    w.run_once()
    stuck = submit("stuck", gpus=8)
    clock.advance(1)
    w.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.ADMITTED  # quota allows it; no node has room
    assert Workload.objects.get(pk=first.pk).state in (
        Workload.State.ADMITTED,
        Workload.State.RUNNING,
    )

    clock.advance(299)
    w.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.ADMITTED  # 299 s since its admission: not yet
    clock.advance(1)
    report = w.run_once()
    stuck.refresh_from_db()
    assert report.pods_ready_timeouts == 1
    assert stuck.state == Workload.State.PENDING
    assert stuck.eviction_reason == PODS_READY_TIMEOUT and stuck.requeue_count == 1
    assert stuck.cluster_queue is None and stuck.quota_usage == {}
    assert stuck.requeue_at == clock.now + timedelta(seconds=60)
    (status,) = selectors.cluster_queue_status()
    assert status.flavors_usage[0][1][0].total == "8"  # only `first` holds quota now

    clock.advance(30)
    w.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.PENDING  # backing off
    assert stuck.pending_reason == PODS_READY_TIMEOUT and "backoff" in stuck.reason

    clock.advance(31)
    w.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.ADMITTED  # requeued after the backoff

    clock.advance(300)
    w.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.PENDING and stuck.requeue_count == 2
    assert stuck.requeue_at == clock.now + timedelta(seconds=120)


def test_a_timeout_of_zero_never_evicts() -> None:
    register(1, "dgx-h100")
    cluster_queue([("h100", 16)])
    submit("first", gpus=8)
    stuck = submit("stuck", gpus=8)
    clock = Clock()
    w = worker(clock, timeout_s=0)
    w.run_once()
    clock.advance(10_000)
    w.run_once()
    stuck.refresh_from_db()
    assert stuck.state == Workload.State.ADMITTED and stuck.evictions == 0
