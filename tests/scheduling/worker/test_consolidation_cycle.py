"""Consolidation through the scheduling cycle on the database side (issue 37): a 2 x 8-GPU gang
whose reservation cannot complete within its horizon moves the batch pods off two nodes, through
the eviction services (the same path as preemption), and starts; the online pod on the third node
stays where it is; a queue annotated gpusched.io/consolidation: Never keeps its pods in place."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import yaml
from django.utils import timezone

from scheduling import events, services
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.core.scheduler import Framework
from scheduling.core.types import Resources, ServiceClass
from scheduling.models import Event, Pod, Workload
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import load_profile
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.database_side import database_cycle
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def queues(never: str = "") -> None:
    """Tenants `a` (the gang's) and `b` (the small pods'), each with the whole cluster as quota;
    `never` is annotated gpusched.io/consolidation: Never."""
    docs = ["kind: ResourceFlavor\nmetadata: {name: any}"]
    for name in ("a", "b"):
        annotation = "\n  annotations: {gpusched.io/consolidation: Never}" if name == never else ""
        docs.append(
            f"kind: ClusterQueue\nmetadata:\n  name: {name}{annotation}\nspec:\n"
            "  resourceGroups:\n  - coveredResources: [nvidia.com/gpu]\n    flavors:\n"
            "    - name: any\n      resources: [{name: nvidia.com/gpu, nominalQuota: 24}]"
        )
        docs.append(
            f"kind: LocalQueue\nmetadata: {{name: default, namespace: {name}}}\n"
            f"spec: {{clusterQueue: {name}}}"
        )
        factories.tenant(name)
    services.queues_apply(config=parse_documents(list(yaml.safe_load_all("\n---\n".join(docs)))))


def submit(
    tenant: str, name: str, *, gpus: int, pods: int = 1, klass: ServiceClass = ServiceClass.BATCH
) -> Workload:
    template = PodTemplate(resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=gpus))
    return services.workload_submit(
        tenant=factories.tenant(tenant),
        name=name,
        service_class=klass,
        pod_sets=[
            services.PodSetSpec("main", pods, template, min_count=pods if pods > 1 else None)
        ],
    )


def fragmented(start: datetime) -> SchedulingCycle:
    """Three 8-GPU nodes: one holds the online pod `serve` alone, the others 2 and 5 batch
    pods of tenant b: 7 + 6 + 3 GPUs free, no node empty."""
    factories.nodes(3)
    submit("b", "serve", gpus=1, klass=ServiceClass.ONLINE)
    for k in range(23):
        submit("b", f"small-{k}", gpus=1)
    cycle = database_cycle(Framework(load_profile("topology")), identity="w1")
    cycle.clock = lambda: start
    cycle.run_once()
    held = {p.name: p for p in Pod.objects.filter(phase__in=Pod.PLACED_PHASES)}
    assert len(held) == 24
    node_of = {name: p.allocations.get(active=True).node.name for name, p in held.items()}
    serve_node = node_of.pop("serve-main-0")
    others = sorted({n for n in node_of.values() if n != serve_node})
    keep = {serve_node: 0, others[0]: 2, others[1]: 5}
    done = []
    for node, left in keep.items():
        on_node = sorted(name for name, n in node_of.items() if n == node)
        done += [held[name] for name in on_node[left:]]
    services.pods_finish(pods=done, now=start)
    return cycle


def placed(name: str) -> int:
    return Pod.objects.filter(workload__name=name, phase__in=Pod.PLACED_PHASES).count()


def test_a_gang_beyond_its_horizon_moves_batch_pods_and_never_the_online_one() -> None:
    queues()
    start = timezone.now()
    cycle = fragmented(start)
    cycle.reservation_horizon_s = 60.0
    submit("a", "train", gpus=8, pods=2)
    cycle.clock = lambda: start + timedelta(seconds=30)
    assert cycle.run_once().reserved == 1 and placed("train") == 0
    cycle.clock = lambda: start + timedelta(seconds=100)  # held 70 s > 60 s: cannot complete
    report = cycle.run_once()
    assert placed("train") == 2
    assert report.preempted == 7  # the 2 + 5 batch pods, each its own workload
    moved = Workload.objects.filter(evictions=1)
    assert {w.service_class for w in moved} == {ServiceClass.BATCH.value}
    assert all(
        w.reason.startswith("Consolidated: moved to make room for gang a/train") for w in moved
    )
    assert Workload.objects.get(name="serve").evictions == 0
    evicted = Event.objects.filter(type=events.WorkloadEvicted.TYPE)
    assert evicted.count() == 7
    # The moved pods go back to their queue and are placed again, on the node left to them.
    cycle.clock = lambda: start + timedelta(seconds=130)
    cycle.run_once()
    assert all(placed(w.name) == 1 for w in moved)


def test_a_queue_that_turned_consolidation_off_keeps_its_pods_in_place() -> None:
    queues(never="b")
    start = timezone.now()
    cycle = fragmented(start)
    cycle.reservation_horizon_s = 60.0
    submit("a", "train", gpus=8, pods=2)
    cycle.clock = lambda: start + timedelta(seconds=30)
    cycle.run_once()
    cycle.clock = lambda: start + timedelta(seconds=100)
    report = cycle.run_once()
    assert report.preempted == 0 and placed("train") == 0
    assert not Workload.objects.filter(evictions__gt=0).exists()
