"""Kueue objects acting in the database world: each point of Kueue compatibility applied with
`applyqueues` from Kueue-shaped YAML, then the scheduler worker run over real rows."""

from __future__ import annotations

from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources
from scheduling.models import Event, LocalQueue, Pod, PriorityClass, Workload
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.selectors import cohorts as queue_selectors
from scheduling.selectors import queues as selectors
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

H100 = "NVIDIA-H100-80GB-HBM3"
FLAVOR = (
    "apiVersion: kueue.x-k8s.io/v1beta2\nkind: ResourceFlavor\nmetadata: {name: h100}\n"
    f"spec: {{nodeLabels: {{nvidia.com/gpu.product: {H100}}}}}\n---\n"
)


def apply(tmp_path, text: str) -> str:
    path = tmp_path / "queues.yaml"
    path.write_text(FLAVOR + text)
    out = StringIO()
    call_command("applyqueues", str(path), stdout=out)
    return out.getvalue()


def worker(at: datetime | None = None) -> SchedulingCycle:
    clock = (lambda: at) if at is not None else timezone.now
    return database_cycle(Framework(load_profile("topology")), identity="w1", clock=clock)


def submit(
    tenant: str,
    name: str,
    *,
    gpus: int = 1,
    extended: dict[str, int] | None = None,
    priority_class: str = "",
    queue: str = "default",
) -> Workload:
    template = PodTemplate(
        resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=gpus, extended=extended or {})
    )
    return services.workload_submit(
        tenant=factories.tenant(tenant),
        name=name,
        queue_name=queue,
        priority=None if priority_class else 0,
        priority_class_name=priority_class,
        pod_sets=[services.PodSetSpec("main", 1, template)],
    )


def state(name: str) -> tuple[str, str]:
    w = Workload.objects.get(name=name)
    return w.state, w.pending_reason


def local_queue(namespace: str, cq: str, extra: str = "") -> str:
    return (
        f"kind: LocalQueue\napiVersion: kueue.x-k8s.io/v1beta2\n"
        f"metadata: {{name: default, namespace: {namespace}}}\n"
        f"spec: {{clusterQueue: {cq}{extra}}}\n---\n"
    )


def test_an_extended_resource_quota_holds_a_workload_back(tmp_path) -> None:
    factories.nodes(1)
    apply(
        tmp_path,
        "kind: ClusterQueue\nmetadata: {name: team}\nspec:\n  namespaceSelector: {}\n"
        "  resourceGroups:\n"
        "  - coveredResources: [nvidia.com/gpu, example.com/credits, pods]\n    flavors:\n"
        "    - name: h100\n      resources:\n"
        "      - {name: nvidia.com/gpu, nominalQuota: 8}\n"
        "      - {name: example.com/credits, nominalQuota: 100}\n"
        "      - {name: pods, nominalQuota: 10}\n---\n" + local_queue("team", "team"),
    )
    submit("team", "first", extended={"example.com/credits": 60})
    submit("team", "second", extended={"example.com/credits": 60})
    worker().run_once()
    assert state("first") == ("Admitted", "")
    assert Workload.objects.get(name="first").quota_usage == {
        "h100|nvidia.com/gpu": 1000,
        "h100|example.com/credits": 60,
        "h100|pods": 1,
    }
    assert Pod.objects.get(workload__name="first").phase == "Bound"
    assert state("second") == ("Pending", "WaitingForQuota")
    assert "example.com/credits" in Workload.objects.get(name="second").reason
    (status,) = selectors.cluster_queue_status()
    ((_, usage),) = status.flavors_usage
    shown = {r.name: (r.total, r.nominal_quota) for r in usage}
    assert shown["example.com/credits"] == ("60", "100")
    assert shown["pods"] == ("1", "10")


FAIR_SHARED = """kind: ClusterQueue
metadata: {name: shared}
spec:
  admissionScope: {admissionMode: UsageBasedAdmissionFairSharing}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 1}]
---
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
admissionFairSharing: {usageHalfLifeTime: 1h, usageSamplingInterval: 1m}
---
"""


def test_admission_fair_sharing_orders_two_local_queues_by_decayed_usage(tmp_path) -> None:
    factories.nodes(1)
    apply(tmp_path, FAIR_SHARED + local_queue("a", "shared") + local_queue("b", "shared"))
    t0 = timezone.now()
    # a uses the queue's only GPU for an hour: its history grows on every sample.
    submit("a", "a-past")
    worker(t0).run_once()
    assert state("a-past") == ("Admitted", "")
    for minutes in range(0, 61, 10):
        services.local_queue_usage_sample(now=t0 + timedelta(minutes=minutes))
    services.pods_finish(
        pods=list(Pod.objects.filter(workload__name="a-past")), now=t0 + timedelta(hours=1)
    )
    usage = queue_selectors.local_queue_fair_usage()
    a_used = float(usage["a/default"].consumed["nvidia.com/gpu"])
    assert 0.4 < a_used < 0.6  # about half an hour's worth after one half-life of use
    assert usage["a/default"].rank == 2 and usage["b/default"].rank == 1
    assert Event.objects.filter(type="queues.usage").exists()
    # a's workload is older, b's newer: b, with the lower decayed usage, is admitted first.
    submit("a", "a-next")
    submit("b", "b-next")
    waiting = {p.workload.name: p.position for p in selectors.pending_workloads()}
    assert waiting == {"b-next": 1, "a-next": 2}
    worker(t0 + timedelta(hours=1, minutes=1)).run_once()
    assert state("b-next") == ("Admitted", "")
    assert state("a-next") == ("Pending", "WaitingForQuota")
    # b paid the entry penalty at once: 1 GPU x (1 - 0.5 ** (1m / 1h)).
    b_row = LocalQueue.objects.get(namespace="b")
    assert b_row.consumed_resources["nvidia.com/gpu"] == pytest.approx(1 - 0.5 ** (1 / 60))


COHORT_TREE = """kind: Cohort
metadata: {name: org}
---
kind: Cohort
metadata: {name: research}
spec: {parentName: org}
---
kind: Cohort
metadata: {name: product}
spec: {parentName: org, fairSharing: {weight: "2"}}
---
kind: ClusterQueue
metadata: {name: vision}
spec:
  cohortName: research
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 2}]
---
kind: ClusterQueue
metadata: {name: serving}
spec:
  cohortName: product
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
"""


def test_a_cohort_tree_lends_through_its_parent(tmp_path) -> None:
    factories.nodes(2)
    out = apply(
        tmp_path, COHORT_TREE + local_queue("vision", "vision") + local_queue("serving", "serving")
    )
    assert "cohorts: org, research, product" in out
    submit("vision", "train", gpus=8)  # 2 of its own, 6 borrowed from serving through org
    worker().run_once()
    assert state("train") == ("Admitted", "")
    status = {s.name: s for s in selectors.cluster_queue_status()}
    ((_, (gpu,)),) = status["vision"].flavors_usage
    assert (gpu.total, gpu.borrowed) == ("8", "6")
    assert status["vision"].cohort_path == ("research", "org")
    cohorts = {c.name: c for c in queue_selectors.cohort_status()}
    assert cohorts["research"].parent == "org" and cohorts["product"].weight == 2.0
    # Without lending limits nothing is kept local: all 8 GPUs count against org's 10.
    org = cohorts["org"].resources[0]
    assert (org.subtree_quota, org.usage) == ("10", "8")
    # serving may still use the 2 GPUs left of its own quota, not more.
    submit("serving", "serve", gpus=3)
    worker().run_once()
    assert state("serve") == ("Pending", "WaitingForQuota")


PRIORITIES = """kind: WorkloadPriorityClass
metadata: {name: high}
value: 1000
---
kind: WorkloadPriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1
---
kind: ClusterQueue
metadata: {name: team}
spec:
  preemption: {withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
"""


def test_a_workload_priority_class_orders_and_preempts(tmp_path) -> None:
    factories.nodes(1)
    apply(tmp_path, PRIORITIES + local_queue("team", "team"))
    kinds = set(PriorityClass.objects.filter(name="high").values_list("kind", "value"))
    assert kinds == {("WorkloadPriorityClass", 1000), ("PriorityClass", 1)}
    # The WorkloadPriorityClass wins the name (as Kueue's label wins over priorityClassName).
    low = submit("team", "low-old", gpus=8, priority_class="low")
    high = submit("team", "high-new", gpus=8, priority_class="high")
    assert (low.priority, high.priority, high.priority_class_kind) == (
        10,
        1000,
        "WorkloadPriorityClass",
    )
    worker().run_once()
    assert state("high-new") == ("Admitted", "")  # newer, but of the higher class
    assert state("low-old") == ("Pending", "WaitingForQuota")
    # Once admitted, a lower class is preempted for a higher one.
    services.workload_cancel(workload=Workload.objects.get(name="high-new"))
    worker().run_once()
    assert state("low-old") == ("Admitted", "")
    submit("team", "urgent", gpus=8, priority_class="high")
    worker().run_once()
    assert state("urgent") == ("Admitted", "")
    assert state("low-old") == ("Pending", "Preempted")


def test_an_inactive_workload_is_evicted_and_not_readmitted(tmp_path) -> None:
    factories.nodes(1)
    apply(
        tmp_path,
        "kind: ClusterQueue\nmetadata: {name: team}\nspec:\n  resourceGroups:\n"
        "  - coveredResources: [nvidia.com/gpu]\n    flavors:\n    - name: h100\n"
        "      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]\n---\n"
        + local_queue("team", "team"),
    )
    w = submit("team", "job", gpus=4)
    worker().run_once()
    assert Pod.objects.get(workload=w).phase == "Bound"
    services.workload_set_active(workload=Workload.objects.get(pk=w.pk), active=False)
    report = worker().run_once()
    assert report.preempted == 1
    w.refresh_from_db()
    assert (w.state, w.pending_reason, w.evictions) == ("Pending", "InactiveWorkload", 1)
    assert w.cluster_queue is None and w.quota_usage == {}
    assert Pod.objects.get(workload=w).phase == "Pending"
    assert not Pod.objects.get(workload=w).allocations.filter(active=True).exists()
    for _ in range(2):
        worker().run_once()
    assert state("job") == ("Pending", "InactiveWorkload")
    services.workload_set_active(workload=Workload.objects.get(pk=w.pk), active=True)
    worker().run_once()
    assert state("job") == ("Admitted", "")


def test_without_cluster_queues_an_inactive_workload_is_not_admitted() -> None:
    factories.nodes(1)
    w = submit("team", "job")
    services.workload_set_active(workload=w, active=False)
    worker().run_once()
    assert state("job") == ("Pending", "InactiveWorkload")
    services.workload_set_active(workload=Workload.objects.get(pk=w.pk), active=True)
    worker().run_once()
    assert state("job")[0] == "Admitted"


def test_applying_a_cohort_cycle_against_stored_cohorts_is_refused(tmp_path) -> None:
    apply(tmp_path, "kind: Cohort\nmetadata: {name: a}\nspec: {parentName: b}\n")
    with pytest.raises(Exception, match="Cohort parentName makes a cycle"):
        apply(tmp_path, "kind: Cohort\nmetadata: {name: b}\nspec: {parentName: a}\n")
