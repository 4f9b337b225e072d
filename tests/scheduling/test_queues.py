"""Queues in the database and the worker: applyqueues, admission with quota and flavors, borrowing
and reclaiming in a cohort, node-level preemption, gangs, and pending transparency."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db.models import Count, Sum
from django.utils import timezone

from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources, ServiceClass, TopologyPolicy
from scheduling.models import (
    ClusterQueue,
    Event,
    Gpu,
    LocalQueue,
    Node,
    Pod,
    PriorityClass,
    ResourceFlavor,
    Topology,
    Workload,
)
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.selectors import queues as selectors
from scheduling.worker import queue_state
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from sim.runs import simulations_record
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-80GB"


def worker() -> SchedulingCycle:
    return database_cycle(Framework(load_profile("topology")), identity="w1")


def apply(text: str) -> None:
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all(text))))


def queues(*specs: tuple[str, int], cohort: str = "", preemption: str = "", flavor="h100") -> None:
    """A flavor for H100 nodes, one cluster queue per (tenant, GPUs) with a LocalQueue "default"
    in the tenant's namespace."""
    docs = [
        "kind: ResourceFlavor\nmetadata: {name: h100}\n"
        f"spec: {{nodeLabels: {{nvidia.com/gpu.product: {H100}}}}}",
        "kind: ResourceFlavor\nmetadata: {name: a100}\n"
        f"spec: {{nodeLabels: {{nvidia.com/gpu.product: {A100}}}}}",
    ]
    for tenant, gpus in specs:
        docs.append(
            f"kind: ClusterQueue\nmetadata: {{name: {tenant}}}\nspec:\n"
            + (f"  cohortName: {cohort}\n" if cohort else "")
            + (f"  preemption: {preemption}\n" if preemption else "")
            + "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n"
            f"    - name: {flavor}\n"
            f"      resources: [{{name: nvidia.com/gpu, nominalQuota: {gpus}}}]"
        )
        docs.append(
            f"kind: LocalQueue\nmetadata: {{name: default, namespace: {tenant}}}\n"
            f"spec: {{clusterQueue: {tenant}}}"
        )
    apply("\n---\n".join(docs))


def submit(
    tenant: str,
    name: str,
    *,
    gpus: int = 4,
    pods: int = 1,
    priority: int | None = 0,
    service_class: ServiceClass = ServiceClass.BATCH,
    gang: bool = False,
    duration_s: float | None = None,
    policy: TopologyPolicy = TopologyPolicy.NONE,
    priority_class: str = "",
) -> Workload:
    template = PodTemplate(
        resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=gpus),
        topology_policy=policy,
    )
    submitted = services.workload_submit(
        tenant=factories.tenant(tenant),
        name=name,
        priority=priority,
        priority_class_name=priority_class,
        service_class=service_class,
        pod_sets=[services.PodSetSpec("main", pods, template, min_count=pods if gang else None)],
    )
    if duration_s:
        simulations_record(submitted, duration_s=duration_s)
    return submitted


def states() -> dict[str, str]:
    return dict(Workload.objects.values_list("name", "state"))


def bound_pods(workload: str) -> int:
    return Pod.objects.filter(workload__name=workload, phase__in=["Bound", "Running"]).count()


# --- applyqueues ---------------------------------------------------------------------------------


def test_applyqueues_applies_the_shipped_demo_queues_and_is_idempotent() -> None:
    out = StringIO()
    call_command("applyqueues", "demo", stdout=out)
    assert "cluster queues: vision, nlp, inference, research" in out.getvalue()
    call_command("applyqueues", "demo", stdout=StringIO())
    assert ClusterQueue.objects.count() == 4 and ResourceFlavor.objects.count() == 6
    assert set(LocalQueue.objects.values_list("namespace", flat=True)) == {
        "vision",
        "nlp",
        "inference",
        "research",
    }
    assert PriorityClass.objects.get(name="opportunistic").preemption_policy == "Never"
    inference = queue_state.cluster_queue_spec(ClusterQueue.objects.get(name="inference"))
    mig = inference.quota("a100-mig", "nvidia.com/mig-1g.10gb")
    assert mig is not None and mig.nominal == 16
    assert Event.objects.filter(type="queues.changed").count() == 2


def test_applyqueues_refuses_unknown_keys_naming_them(tmp_path) -> None:
    bad = tmp_path / "q.yaml"
    bad.write_text("kind: ClusterQueue\nmetadata: {name: a}\nspec: {cohortNme: x}\n")
    with pytest.raises(CommandError, match="unknown key 'cohortNme'"):
        call_command("applyqueues", str(bad))
    missing = tmp_path / "m.yaml"
    missing.write_text(
        "kind: LocalQueue\nmetadata: {name: q, namespace: n}\nspec: {clusterQueue: x}"
    )
    with pytest.raises(CommandError, match="ClusterQueue 'x' does not exist"):
        call_command("applyqueues", str(missing))
    assert not ClusterQueue.objects.exists() and not LocalQueue.objects.exists()


def test_applyqueues_refuses_repeated_keys_naming_them(tmp_path) -> None:
    bad = tmp_path / "q.yaml"
    bad.write_text(
        "kind: ResourceFlavor\nmetadata: {name: a}\n---\nkind: ClusterQueue\n"
        "metadata: {name: b}\nspec:\n  cohortName: x\n  cohortName: y\n"
    )
    with pytest.raises(CommandError, match="line 8: duplicate key 'cohortName'"):
        call_command("applyqueues", str(bad))
    assert not ResourceFlavor.objects.exists()


def test_bad_profiles_end_the_commands_naming_the_key(tmp_path) -> None:
    profile = tmp_path / "p.yaml"
    profile.write_text("profiles:\n- schedulerName: x\n  plugins: {filter: {enable: []}}\n")
    for command in ("runscheduler", "runkube"):
        with pytest.raises(
            CommandError, match=r"p.yaml: profiles\[0\].plugins.filter: unknown key 'enable'"
        ):
            call_command(command, "--profile", str(profile))


def test_priority_classes_set_priority_and_preemption_policy() -> None:
    call_command("applyqueues", "demo", stdout=StringIO())
    w = submit("research", "sweep", priority=None, priority_class="opportunistic")
    assert (w.priority, w.priority_class_name, w.preemption_policy) == (0, "opportunistic", "Never")
    w = submit("inference", "serve", priority=None, priority_class="online")
    assert w.priority == 200
    with pytest.raises(services.ServiceError, match="priority class 'vip' does not exist"):
        submit("inference", "x", priority_class="vip")


# --- admission ---------------------------------------------------------------------------------


def test_quota_admits_what_fits_and_the_rest_waits_in_order() -> None:
    factories.nodes(2)  # 16 GPUs, more than the quota
    queues(("team", 8))
    for k in range(4):
        submit("team", f"job{k}")
    report = worker().run_once()
    assert report.admitted == 2 and report.bound == 2
    assert states() == {
        "job0": "Admitted",
        "job1": "Admitted",
        "job2": "Pending",
        "job3": "Pending",
    }
    waiting = {p.workload.name: p for p in selectors.pending_workloads()}
    assert (waiting["job2"].reason, waiting["job2"].position) == ("WaitingForQuota", 1)
    assert waiting["job3"].position == 2
    assert "insufficient unused quota for nvidia.com/gpu in flavor h100" in waiting["job2"].message
    # A job ends: the next one is admitted and placed.
    services.pods_finish(pods=list(Pod.objects.filter(workload__name="job0")), now=timezone.now())
    worker().run_once()
    assert states()["job2"] == "Admitted" and bound_pods("job2") == 1


def test_the_flavor_decides_where_pods_go() -> None:
    for spec in build_nodes(synthetic_pools(1, "dgx-h100") + synthetic_pools(1, "dgx-a100")):
        services.node_register(spec=spec, source=Node.Source.SIMULATOR)
    queues(("team", 8), flavor="a100")
    submit("team", "job")
    worker().run_once()
    w = Workload.objects.get(name="job")
    assert w.flavors == {"nvidia.com/gpu": "a100"}
    assert w.quota_usage == {"a100|nvidia.com/gpu": 4000}
    assert w.node_selector == {"nvidia.com/gpu.product": A100}
    assert Pod.objects.get(workload=w).allocations.get(active=True).node.name.startswith("dgx-a100")


def test_a_workload_without_local_queue_is_inadmissible() -> None:
    factories.nodes(1)
    queues(("team", 8))
    submit("stranger", "job")
    worker().run_once()
    w = Workload.objects.get(name="job")
    assert (w.state, w.pending_reason) == ("Pending", "Inadmissible")
    assert w.reason == "LocalQueue stranger/default does not exist"


def test_two_tenants_in_a_cohort_borrow_and_reclaim() -> None:
    """b borrows a's idle quota; when a's work arrives, a reclaims it: b's most recent workloads
    are evicted (allocations released, events), requeued, and a's pods run in the same cycle."""
    factories.nodes(2)  # 16 GPUs
    queues(("a", 8), ("b", 8), cohort="lab", preemption="{reclaimWithinCohort: Any}")
    for k in range(4):
        submit("b", f"b{k}")
    report = worker().run_once()
    assert report.admitted == 4 and report.bound == 4  # b uses 16: 8 of them borrowed
    status = {s.name: s for s in selectors.cluster_queue_status()}
    ((_, usage),) = status["b"].flavors_usage
    assert (usage[0].total, usage[0].borrowed) == ("16", "8")
    assert status["b"].weighted_share == 500  # 8 borrowed of 16 lendable

    before = Event.objects.order_by("-id").values_list("id", flat=True).first()
    submit("a", "a0")
    submit("a", "a1")
    report = worker().run_once()
    assert report.admitted == 2 and report.preempted == 2 and report.bound == 2
    assert states() == {
        "b0": "Admitted",
        "b1": "Admitted",
        "b2": "Pending",
        "b3": "Pending",
        "a0": "Admitted",
        "a1": "Admitted",
    }
    evicted = Workload.objects.filter(name__in=["b2", "b3"])
    assert {(w.evictions, w.cluster_queue_id) for w in evicted} == {(1, None)}
    assert all(w.reason.startswith("Preempted to admit") for w in evicted)
    new = Event.objects.filter(id__gt=before)
    assert new.filter(type="workload.evicted").count() == 2
    released = new.filter(type="allocation.released")
    assert released.count() == 2 and all("preempted" in e.payload["reason"] for e in released)
    assert Pod.objects.filter(workload__in=evicted, phase="Pending").count() == 2
    assert bound_pods("a0") == bound_pods("a1") == 1
    assert Gpu.objects.aggregate(total=Sum("used_milli"))["total"] == 16_000  # no leak, no double
    # b's evicted work waits for quota now; a is within its nominal quota, b too.
    worker().run_once()
    assert states()["b2"] == "Pending"
    assert Workload.objects.get(name="b2").pending_reason == "WaitingForQuota"


def test_without_reclaim_the_owner_waits_for_the_borrower() -> None:
    factories.nodes(2)
    queues(("a", 8), ("b", 8), cohort="lab")
    for k in range(4):
        submit("b", f"b{k}")
    worker().run_once()
    submit("a", "a0")
    report = worker().run_once()
    assert report.preempted == 0 and states()["a0"] == "Pending"


# --- node-level preemption -----------------------------------------------------------------------


def test_online_preempts_batch_on_a_full_node_and_the_victims_are_requeued() -> None:
    factories.nodes(1)
    for k in range(8):
        submit("batch", f"b{k}", gpus=1, priority=100)
    worker().run_once()
    submit("serve", "online", gpus=2, service_class=ServiceClass.ONLINE)
    report = worker().run_once()
    assert report.preempted == 2 and bound_pods("online") == 1
    victims = Workload.objects.filter(evictions=1)
    assert sorted(victims.values_list("name", flat=True)) == ["b6", "b7"]  # the most recent
    assert all("Preempted by serve/online (online" in w.reason for w in victims)
    assert Pod.objects.filter(workload__in=victims, phase="Pending").count() == 2


def test_batch_never_preempts_online() -> None:
    factories.nodes(1)
    for k in range(8):
        submit("serve", f"s{k}", gpus=1, service_class=ServiceClass.ONLINE)
    worker().run_once()
    submit("batch", "big", gpus=1, priority=1000)
    report = worker().run_once()
    assert report.preempted == 0 and bound_pods("big") == 0
    w = Workload.objects.get(name="big")
    assert w.pending_reason == "NoFit" and "Insufficient nvidia.com/gpu" in w.reason


# --- gangs -------------------------------------------------------------------------------------


def test_gangs_are_all_or_nothing_and_two_big_gangs_do_not_deadlock() -> None:
    factories.nodes(2)  # 16 GPUs; each gang needs 12
    submit("t", "first", gpus=4, pods=3, gang=True)
    submit("t", "second", gpus=4, pods=3, gang=True)
    report = worker().run_once()
    assert report.gangs_bound == 1
    assert (bound_pods("first"), bound_pods("second")) == (3, 0)
    second = Workload.objects.get(name="second")
    assert second.pending_reason in ("WaitingForGang", "NoFit")
    services.pods_finish(pods=list(Pod.objects.filter(workload__name="first")), now=timezone.now())
    later = timezone.now() + timedelta(seconds=30)  # past the backoff
    w = worker()
    w.clock = lambda: later
    w.run_once()
    assert bound_pods("second") == 3


def test_a_gang_waiting_is_named_by_its_workload_never_by_its_internal_id() -> None:
    """The reasons users read (each pod's, its workload's, the why-pending list's) name the gang
    as namespace/workload (pod set); the key that groups its members stays internal."""
    factories.nodes(1)  # 8 GPUs: two of the three members fit
    submit("ml", "train-7", gpus=4, pods=3, gang=True)
    worker().run_once()
    w = Workload.objects.get(name="train-7")
    reasons = list(w.pods.values_list("last_reason", flat=True))
    assert any("WaitingForGang" in r and "gang ml/train-7 (main)" in r for r in reasons)
    (pending,) = selectors.pending_workloads(namespace="ml")
    for text in (*reasons, w.reason, pending.message):
        assert f"{w.pk}/main" not in text and f"gang {w.pk}" not in text


def test_a_gang_reclaims_nodes_from_borrowers_when_free_gpus_are_scattered() -> None:
    """Quota admits a's gang (a is within its nominal quota), but the 4 free GPUs are 2 + 2 on
    two nodes. The gang evicts the fewest pods of b (borrowing) that free one node's set."""
    factories.nodes(2)
    queues(("a", 8), ("b", 8), cohort="lab", preemption="{reclaimWithinCohort: Any}")
    for k in range(16):
        submit("b", f"b{k}", gpus=1)
    worker().run_once()
    done = []
    for node in ("dgx-h100-0000", "dgx-h100-0001"):
        done += list(Pod.objects.filter(allocations__active=True, allocations__node__name=node)[:2])
    services.pods_finish(pods=done, now=timezone.now())
    submit("a", "gang", gpus=4, pods=1, gang=True)
    report = worker().run_once()
    assert states()["gang"] == "Admitted" and bound_pods("gang") == 1
    assert report.preempted == 2
    evicted = Workload.objects.filter(evictions=1)
    assert evicted.count() == 2
    assert all(w.reason.startswith("Preempted to make room for gang a/gang") for w in evicted)


def test_a_gang_with_a_member_that_cannot_fit_binds_nothing() -> None:
    factories.nodes(1)
    submit("t", "gang", gpus=4, pods=3, gang=True)
    worker().run_once()
    assert bound_pods("gang") == 0
    counts = dict(Pod.objects.values_list("phase").annotate(n=Count("id")))
    assert counts == {"Pending": 3}


def test_applyqueues_loads_kueues_tas_setup_and_refuses_a_flavor_naming_no_topology(
    tmp_path,
) -> None:
    # Kueue's site/static/examples/tas/sample-gpu-queues.yaml, its Topology at v1alpha1.
    tas = tmp_path / "tas.yaml"
    tas.write_text(
        "apiVersion: kueue.x-k8s.io/v1alpha1\nkind: Topology\nmetadata: {name: default}\n"
        "spec:\n  levels:\n  - nodeLabel: cloud.provider.com/topology-block\n"
        "  - nodeLabel: cloud.provider.com/topology-rack\n  - nodeLabel: kubernetes.io/hostname\n"
        "---\nkind: ResourceFlavor\napiVersion: kueue.x-k8s.io/v1beta1\n"
        "metadata: {name: tas-flavor}\n"
        "spec: {nodeLabels: {cloud.provider.com/node-group: tas-group}, topologyName: default}\n"
    )
    out = StringIO()
    call_command("applyqueues", str(tas), stdout=out)
    assert "topologies: default" in out.getvalue()
    assert Topology.objects.get().levels == [
        "cloud.provider.com/topology-block",
        "cloud.provider.com/topology-rack",
        "kubernetes.io/hostname",
    ]
    assert ResourceFlavor.objects.get().topology_name == "default"
    dangling = tmp_path / "dangling.yaml"
    dangling.write_text("kind: ResourceFlavor\nmetadata: {name: f}\nspec: {topologyName: racks}")
    with pytest.raises(CommandError, match="ResourceFlavor f: Topology 'racks' does not exist"):
        call_command("applyqueues", str(dangling))
