import dataclasses
from datetime import timedelta

import pytest
from django.db.models import Sum
from django.utils import timezone

from scheduling import events, services
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.types import Resources
from scheduling.models import (
    Allocation,
    Event,
    Gpu,
    GpuAssignment,
    Lease,
    Node,
    Pod,
    PodConstraints,
    Workload,
)
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.worker import cluster_state
from sim.cluster import build_nodes, synthetic_pools
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def schedule_pending() -> tuple[cluster_state.ClusterState, list[tuple[Pod, Decision]]]:
    now = timezone.now()
    services.workloads_admit(workloads=Workload.objects.filter(state="Pending"), now=now)
    cluster = cluster_state.cluster_state()
    framework = Framework(load_profile("topology"))
    pods = cluster_state.pending_pods(now, 1000)
    return cluster, [
        (pod, framework.schedule_one(cluster_state.pod_request(pod), cluster.snapshot))
        for pod in pods
    ]


def test_binding_moves_counters_writes_rows_and_publishes_events() -> None:
    factories.nodes(2)
    owner = factories.tenant()
    factories.workload(owner, "train", pods=2, gpus=4, cpu_milli=8000)
    factories.workload(owner, "infer", pods=3, gpu_milli=300)
    cluster, decisions = schedule_pending()
    first_event = Event.objects.order_by("-id").values_list("id", flat=True).first() or 0

    result = services.placements_commit(
        cluster=cluster, placed=decisions, scheduler="s1", now=timezone.now()
    )

    assert len(result.bound) == 5 and not result.conflicts
    assert set(Pod.objects.values_list("phase", flat=True)) == {"Bound"}
    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 8 * 1000 + 3 * 300
    assert Node.objects.aggregate(cpu=Sum("cpu_used_milli"))["cpu"] == 2 * 8000 + 3 * 1000
    assert GpuAssignment.objects.filter(active=True, exclusive=True).count() == 8
    bound = Event.objects.filter(id__gt=first_event, type="pod.bound")
    assert bound.count() == 5
    assert {e.payload["tenant"] for e in bound} == {"team-a"}


def test_a_stale_snapshot_cannot_double_book_a_gpu() -> None:
    factories.nodes(1)
    owner = factories.tenant()
    factories.workload(owner, "a", gpus=8)
    factories.workload(owner, "b", gpus=8)
    # Two schedulers with snapshots taken before either commits; each places "its" pod.
    cluster_a, decisions = schedule_pending()
    decisions_a = [(p, d) for p, d in decisions if p.workload.name == "a"]
    pod_b = next(p for p, _ in decisions if p.workload.name == "b")
    cluster_b = cluster_state.cluster_state()
    framework = Framework(load_profile("topology"))
    decisions_b = [
        (pod_b, framework.schedule_one(cluster_state.pod_request(pod_b), cluster_b.snapshot))
    ]
    assert decisions_b[0][1].placement is not None

    assert services.placements_commit(
        cluster=cluster_a, placed=decisions_a, scheduler="a", now=timezone.now()
    ).bound
    result = services.placements_commit(
        cluster=cluster_b, placed=decisions_b, scheduler="b", now=timezone.now()
    )

    assert not result.bound and len(result.conflicts) == 1
    assert Gpu.objects.filter(used_milli__gt=1000).count() == 0
    assert Pod.objects.get(workload__name="b").phase == "Pending"


def test_a_pod_bound_by_someone_else_is_a_conflict_not_a_second_allocation() -> None:
    factories.nodes(2)
    factories.workload(factories.tenant(), "a", gpus=1)
    cluster, decisions = schedule_pending()
    services.placements_commit(cluster=cluster, placed=decisions, scheduler="a", now=timezone.now())
    result = services.placements_commit(
        cluster=cluster, placed=decisions, scheduler="b", now=timezone.now()
    )
    assert not result.bound
    assert Allocation.objects.filter(active=True).count() == 1


def test_finishing_pods_releases_everything_and_finishes_the_workload() -> None:
    factories.nodes(1)
    workload = factories.workload(factories.tenant(), "a", pods=2, gpus=2, cpu_milli=4000)
    cluster, decisions = schedule_pending()
    services.placements_commit(cluster=cluster, placed=decisions, scheduler="s", now=timezone.now())
    pods = list(Pod.objects.select_related("workload__tenant"))
    services.pods_start(pods=pods, now=timezone.now())
    services.pods_finish(pods=pods, now=timezone.now())

    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 0
    assert Node.objects.get().cpu_used_milli == 0
    assert not Allocation.objects.filter(active=True).exists()
    workload.refresh_from_db()
    assert workload.state == "Finished"
    types = list(Event.objects.values_list("type", flat=True))
    assert types.count("allocation.released") == 2
    assert types.index("pod.bound") < types.index("pod.phase") < types.index("allocation.released")


def test_an_end_is_recorded_once_whoever_reports_it_again() -> None:
    factories.nodes(1)
    workload = factories.workload(factories.tenant(), "a", gpus=2)
    cluster, decisions = schedule_pending()
    services.placements_commit(cluster=cluster, placed=decisions, scheduler="s", now=timezone.now())
    services.pods_start(
        pods=list(Pod.objects.select_related("workload__tenant")), now=timezone.now()
    )
    # Two readers of the same pod, as a sync that sees a finished pod twice would hold.
    first, second = (list(Pod.objects.select_related("workload__tenant")) for _ in range(2))
    services.pods_finish(pods=first, now=timezone.now(), succeeded=True)
    before = Event.objects.count()

    services.pods_finish(pods=second, now=timezone.now(), succeeded=False)

    assert Pod.objects.get().phase == "Succeeded"
    workload.refresh_from_db()
    assert workload.state == "Finished"
    assert Event.objects.count() == before  # nothing happened, nothing is published


def test_a_vacated_pod_frees_what_it_held_and_waits_while_its_workload_goes_on() -> None:
    """A Job's pod that ended while the Job runs on: its row is Pending again, its workload
    neither finished nor failed."""
    factories.nodes(1)
    workload = factories.workload(factories.tenant(), "a", gpus=2)
    cluster, decisions = schedule_pending()
    services.placements_commit(cluster=cluster, placed=decisions, scheduler="s", now=timezone.now())
    pods = list(Pod.objects.select_related("workload__tenant"))
    services.pods_start(pods=pods, now=timezone.now())

    services.pods_vacate(pods=pods, now=timezone.now())

    pod = Pod.objects.get()
    assert (pod.phase, pod.bound_at, pod.started_at, pod.finished_at) == (
        "Pending",
        None,
        None,
        None,
    )
    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 0
    assert not Allocation.objects.filter(active=True).exists()
    workload.refresh_from_db()
    assert workload.state == "Running"
    assert (
        list(Event.objects.filter(type="pod.phase").values_list("payload__phase", flat=True))[-1]
        == "Pending"
    )


def test_cancel_releases_bound_pods() -> None:
    factories.nodes(1)
    workload = factories.workload(factories.tenant(), "a", gpus=1)
    cluster, decisions = schedule_pending()
    services.placements_commit(cluster=cluster, placed=decisions, scheduler="s", now=timezone.now())
    services.workload_cancel(workload=Workload.objects.select_related("tenant").get(pk=workload.pk))
    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 0
    assert Pod.objects.get().phase == "Cancelled"
    with pytest.raises(services.ServiceError, match="already Cancelled"):
        services.workload_cancel(
            workload=Workload.objects.select_related("tenant").get(pk=workload.pk)
        )


def test_unschedulable_pods_back_off_and_report_once_per_reason() -> None:
    factories.nodes(1)
    factories.workload(factories.tenant(), "huge", gpus=9)
    for _ in range(3):
        _, decisions = schedule_pending()
        services.pods_unschedulable(failed=decisions, now=timezone.now())
        Pod.objects.update(next_attempt_at=None)
    pod = Pod.objects.get()
    assert pod.attempts == 3
    assert "Insufficient nvidia.com/gpu" in pod.last_reason
    assert Event.objects.filter(type="pod.unschedulable").count() == 1
    assert pod.decisions.count() == 1
    assert pod.pending_explanation["summary"] == pod.last_reason
    assert pod.last_attempt_at is not None


def test_a_new_reason_rewrites_the_explanation_and_keeps_the_backoff_growing() -> None:
    factories.nodes(1)
    factories.workload(factories.tenant(), "huge", gpus=9)
    now = timezone.now()
    _, decisions = schedule_pending()
    services.pods_unschedulable(failed=decisions, now=now)
    first = Pod.objects.get()
    Pod.objects.update(next_attempt_at=None)  # tried again now
    factories.nodes(2)  # the same kind of node, one more: a new count in the reason
    _, decisions = schedule_pending()
    services.pods_unschedulable(failed=decisions, now=now + timedelta(seconds=1))
    pod = Pod.objects.get()
    assert (first.attempts, pod.attempts) == (1, 2)
    assert pod.last_reason != first.last_reason
    assert pod.pending_explanation["summary"] == pod.last_reason
    assert pod.pending_explanation["nodes"] == 2
    backoff = [
        p.next_attempt_at - p.last_attempt_at
        for p in (first, pod)
        if p.next_attempt_at is not None and p.last_attempt_at is not None
    ]
    assert len(backoff) == 2 and backoff[1] > backoff[0]
    assert Event.objects.filter(type="pod.unschedulable").count() == 2


def test_lease_has_one_holder_until_it_expires() -> None:
    now = timezone.now()
    assert services.lease_acquire(name="l", holder="a", duration_s=10, now=now)
    assert not services.lease_acquire(name="l", holder="b", duration_s=10, now=now)
    assert services.lease_acquire(
        name="l", holder="a", duration_s=10, now=now + timedelta(seconds=5)
    )
    later = now + timedelta(seconds=16)
    assert services.lease_acquire(name="l", holder="b", duration_s=10, now=later)
    assert Lease.objects.get(name="l").transitions == 2


@pytest.mark.django_db(transaction=True)
def test_events_are_only_published_inside_a_transaction() -> None:
    with pytest.raises(RuntimeError, match="inside the transaction"):
        events.publish(events.NodeChanged(node="n", cordoned=False, gpus=0))


@pytest.mark.parametrize("listed", [10_000, 0])  # admitted workloads named, or a subquery
def test_pending_pods_come_highest_priority_first_then_oldest_admitted_only(
    listed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cluster_state, "_MAX_LISTED", listed)
    owner = factories.tenant()
    for name, priority in (("low", 0), ("high", 5), ("low-later", 0)):
        factories.workload(owner, name, pods=2, priority=priority)
    services.workloads_admit(
        workloads=Workload.objects.exclude(name="low-later"), now=timezone.now()
    )
    factories.workload(owner, "waits-for-quota", pods=2, priority=9)
    now = timezone.now()
    pods = cluster_state.pending_pods(now, 3)
    assert [p.workload.name for p in pods] == ["high", "high", "low"]
    assert pods[0].workload.tenant.name == owner.name
    assert [p.workload.name for p in cluster_state.pending_pods(now, 10)] == [
        "high",
        "high",
        "low",
        "low",
    ]


def test_workloads_submitted_together_are_each_what_one_submit_makes_all_or_none() -> None:
    owner = factories.tenant()
    template = PodTemplate(resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=1))
    spec = services.PodSetSpec("main", 2, template)
    made = services.workloads_submit(
        specs=[services.WorkloadSpec(owner, name, [spec]) for name in ("a", "b")]
    )
    alone = services.workload_submit(tenant=owner, name="c", pod_sets=[spec])

    assert [w.name for w in made] == ["a", "b"]
    rows = {w.name: w for w in Workload.objects.all()}
    fields = ("state", "priority", "queue_name", "preemption_policy", "pod_sets")
    assert all(
        [getattr(rows[n], f) for f in fields] == [getattr(alone, f) for f in fields] for n in "ab"
    )
    assert Pod.objects.filter(workload__name__in="ab").count() == 4
    assert Event.objects.filter(type="workload.changed").count() == 3

    with pytest.raises(services.ServiceError, match="'b' already exists"):
        services.workloads_submit(
            specs=[services.WorkloadSpec(owner, name, [spec]) for name in ("d", "b")]
        )
    assert not Workload.objects.filter(name="d").exists()


def test_pods_share_their_constraints_row_by_content_whoever_made_them() -> None:
    """Pods mirrored from Kubernetes come one template each (they may differ): equal contents
    share one PodConstraints row, in one submit and across submits; a different one has its own."""
    owner = factories.tenant()

    def member(name: str, zone: str) -> tuple[str, PodTemplate]:
        return name, PodTemplate(
            resources=Resources(cpu_milli=100),
            node_selector={"zone": zone},
            tolerations=({"key": "dedicated", "operator": "Exists"},),
        )

    members = (member("p-0", "a"), member("p-1", "a"), member("p-2", "b"))
    first = services.workload_submit(
        tenant=owner,
        name="group",
        pod_sets=[
            services.PodSetSpec(name="main", count=3, template=PodTemplate(), members=members)
        ],
    )
    rows = dict(first.pods.values_list("name", "constraints__node_selector"))
    assert rows == {"p-0": {"zone": "a"}, "p-1": {"zone": "a"}, "p-2": {"zone": "b"}}
    assert PodConstraints.objects.count() == 2
    again = services.workload_submit(
        tenant=owner,
        name="again",
        pod_sets=[services.PodSetSpec(name="main", count=1, template=members[0][1])],
    )
    assert again.pods.get().constraints_id == first.pods.get(name="p-0").constraints_id
    assert PodConstraints.objects.count() == 2


def test_nodes_registered_together_are_what_registering_each_makes() -> None:
    specs = build_nodes(synthetic_pools(6, "mixed"))
    for spec in specs:
        services.node_register(spec=spec, source=Node.Source.SIMULATOR)
    one_by_one = node_rows()
    Node.objects.all().delete()
    Event.objects.all().delete()

    services.node_register(spec=specs[0], source=Node.Source.SIMULATOR)
    assert services.nodes_register(specs=specs, source=Node.Source.SIMULATOR) == 5
    assert node_rows() == one_by_one
    changes = [e.node for _, e in events.read_after(0) if isinstance(e, events.NodeChanged)]
    assert sorted(changes) == sorted([specs[0].name, *(s.name for s in specs)])

    halved = dataclasses.replace(specs[0], cpu_milli=specs[0].cpu_milli // 2)
    assert services.nodes_register(specs=[halved], source=Node.Source.SIMULATOR) == 0
    assert Node.objects.get(name=halved.name).cpu_milli == halved.cpu_milli


def node_rows() -> list[tuple[object, ...]]:
    """Each node with its GPUs and NUMA nodes, without ids."""
    return [
        (
            node.name,
            node.source,
            node.labels,
            node.taints,
            node.cpu_milli,
            node.memory_mib,
            node.cordoned,
            node.topology,
            list(node.gpus.order_by("index").values_list("index", "uuid", "model", "sharing")),
            list(node.numa.order_by("index").values_list("index", "cpu_milli")),
        )
        for node in Node.objects.order_by("name")
    ]
