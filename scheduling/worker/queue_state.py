"""What the admission cycle reads of the queues, as the core takes it: the queue configuration
(cluster queues, cohorts, flavors, local queues, fair-sharing usage), the queued and the admitted
workloads, and the quota book they make. (The scheduler's snapshot is read by cluster_state; page
queries built on these are in selectors and queue_selectors.)"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from django.conf import settings
from django.db.models import Count, Min

from scheduling import pod_resources
from scheduling.core.domains import DomainError
from scheduling.core.domains import Topology as TopologySpec
from scheduling.core.queueing.admission import QueuedWorkload
from scheduling.core.queueing.config import (
    AdmissionFairSharing,
    AdmissionMode,
    BorrowWithinCohortPolicy,
    ConsolidationPolicy,
    FlavorQuotas,
    FungibilityPolicy,
    NamespaceSelector,
    Preemption,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceGroup,
    ResourceQuota,
    StopPolicy,
    WithinClusterQueue,
)
from scheduling.core.queueing.config import ClusterQueue as ClusterQueueSpec
from scheduling.core.queueing.config import Cohort as CohortSpec
from scheduling.core.queueing.config import LocalQueue as LocalQueueSpec
from scheduling.core.queueing.config import ResourceFlavor as ResourceFlavorSpec
from scheduling.core.queueing.fair_usage import (
    FairUsageState,
)
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.quota import FlavorResource, QuotaBook
from scheduling.core.queueing.resources import GPU, Demand
from scheduling.core.types import (
    PodRequest,
    ServiceClass,
    Taint,
    TaintEffect,
    Toleration,
)
from scheduling.models import (
    AdmissionFairSharingSettings,
    ClusterQueue,
    Cohort,
    LocalQueue,
    Pod,
    ResourceFlavor,
    Topology,
    Workload,
)
from scheduling.worker.cluster_state import pod_request, tolerations_from_json


@dataclass
class QueueSetup:
    """The queue configuration as the core reads it."""

    cluster_queues: dict[str, ClusterQueueSpec] = field(default_factory=dict)
    rows: dict[str, ClusterQueue] = field(default_factory=dict)
    flavors: dict[str, ResourceFlavorSpec] = field(default_factory=dict)
    local_queues: dict[str, LocalQueueSpec] = field(default_factory=dict)  # "namespace/name"
    cohorts: dict[str, CohortSpec] = field(default_factory=dict)
    fair_usage: FairUsageState = field(default_factory=FairUsageState)

    def topology_of(self, flavors: Iterable[str]) -> dict[str, Any]:
        """The Topology of the first of `flavors` (sorted) that names one, as a workload stores
        it ({"name", "levels"}); {} when none does."""
        for name in sorted(flavors):
            flavor = self.flavors.get(name)
            if flavor is not None and flavor.topology is not None:
                return {"name": flavor.topology.name, "levels": list(flavor.topology.levels)}
        return {}

    @property
    def managed(self) -> bool:
        """Without any cluster queue, workloads are admitted as they come (no quotas)."""
        return bool(self.cluster_queues)


def queue_setup() -> QueueSetup:
    rows = {row.name: row for row in ClusterQueue.objects.all()}
    topologies = stored_topologies()
    lq_rows = list(LocalQueue.objects.select_related("cluster_queue"))
    return QueueSetup(
        cluster_queues={name: cluster_queue_spec(row) for name, row in rows.items()},
        rows=rows,
        flavors={row.name: flavor_spec(row, topologies) for row in ResourceFlavor.objects.all()},
        local_queues={
            f"{lq.namespace}/{lq.name}": LocalQueueSpec(
                lq.namespace,
                lq.name,
                lq.cluster_queue.name,
                lq.fair_sharing_weight,
                StopPolicy(lq.stop_policy),
            )
            for lq in lq_rows
        },
        cohorts={row.name: cohort_spec(row) for row in Cohort.objects.all()},
        fair_usage=FairUsageState(
            fair_sharing_settings(),
            {
                f"{lq.namespace}/{lq.name}": MappingProxyType(dict(lq.consumed_resources))
                for lq in lq_rows
                if lq.consumed_resources
            },
        ),
    )


def resource_groups_spec(docs: Iterable[Mapping[str, Any]]) -> tuple[ResourceGroup, ...]:
    """models.ClusterQueue.resource_groups (and Cohort's) as the core's resource groups."""
    return tuple(
        ResourceGroup(
            tuple(group["coveredResources"]),
            tuple(
                FlavorQuotas(
                    fq["name"],
                    MappingProxyType(
                        {
                            r["name"]: ResourceQuota(
                                int(r["nominalQuota"]),
                                r.get("borrowingLimit"),
                                r.get("lendingLimit"),
                            )
                            for r in fq["resources"]
                        }
                    ),
                )
                for fq in group["flavors"]
            ),
        )
        for group in docs
    )


def cluster_queue_spec(row: ClusterQueue) -> ClusterQueueSpec:
    return ClusterQueueSpec(
        name=row.name,
        cohort=row.cohort,
        resource_groups=resource_groups_spec(row.resource_groups),
        queueing_strategy=QueueingStrategy(row.queueing_strategy),
        preemption=Preemption(
            WithinClusterQueue(row.within_cluster_queue),
            ReclaimWithinCohort(row.reclaim_within_cohort),
            BorrowWithinCohortPolicy(row.borrow_within_cohort),
            row.borrow_max_priority_threshold,
        ),
        weight=row.fair_sharing_weight,
        admission_mode=AdmissionMode(row.admission_mode),
        stop_policy=StopPolicy(row.stop_policy),
        namespace_selector=NamespaceSelector(
            tuple((str(op), frozenset(values)) for op, values in row.namespace_selector or [])
        ),
        when_can_borrow=FungibilityPolicy(row.when_can_borrow),
        default_runtime_s=row.default_runtime_s,
        consolidation=ConsolidationPolicy(row.consolidation),
    )


def cohort_spec(row: Cohort) -> CohortSpec:
    return CohortSpec(
        row.name,
        row.parent_name,
        resource_groups_spec(row.resource_groups),
        row.fair_sharing_weight,
    )


def fair_sharing_settings() -> AdmissionFairSharing:
    """Kueue's admissionFairSharing as applied (a Configuration document), else the defaults."""
    row = AdmissionFairSharingSettings.objects.first()
    if row is None:
        return AdmissionFairSharing()
    return AdmissionFairSharing(
        row.usage_half_life_s,
        row.usage_sampling_interval_s,
        MappingProxyType({str(k): float(v) for k, v in row.resource_weights.items()}),
    )


def stored_topologies() -> dict[str, TopologySpec]:
    """The stored Topologies as the core's; levels that no longer make one (edited by hand)
    leave it out, so a flavor naming it has no Topology and says so."""
    out: dict[str, TopologySpec] = {}
    for row in Topology.objects.all():
        try:
            out[row.name] = TopologySpec(row.name, tuple(str(v) for v in row.levels))
        except DomainError:
            continue
    return out


def flavor_spec(
    row: ResourceFlavor, topologies: Mapping[str, TopologySpec] | None = None
) -> ResourceFlavorSpec:
    return ResourceFlavorSpec(
        name=row.name,
        node_labels=MappingProxyType({str(k): str(v) for k, v in row.node_labels.items()}),
        node_taints=tuple(
            Taint(t["key"], t.get("value", ""), TaintEffect(t.get("effect", "NoSchedule")))
            for t in row.node_taints
        ),
        tolerations=tolerations_from_json(row.tolerations),
        topology_name=row.topology_name,
        topology=(topologies or {}).get(row.topology_name),
    )


def usage_key(fr: FlavorResource) -> str:
    return f"{fr[0]}|{fr[1]}"


def parse_usage(doc: Mapping[str, Any]) -> dict[FlavorResource, int]:
    out: dict[FlavorResource, int] = {}
    for key, amount in doc.items():
        flavor, _, resource = key.partition("|")
        out[(flavor, resource)] = int(amount)
    return out


@dataclass(frozen=True)
class PodFacts:
    demand: Demand
    gpu_models: frozenset[str]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...] = ()


def pod_facts(workload_ids: Iterable[int]) -> dict[int, PodFacts]:
    """Per workload: the total its unfinished pods ask for, and the first pod's constraints.
    Counted by the database, a row per distinct request of a workload rather than per pod, and
    the constraints read once a workload: what admission holds of a pending workload does not
    grow with its pods (issue 33: 40 over-quota workloads of 5,000 pods each took the scheduler
    to 3.0 GB)."""
    ids = list(workload_ids)
    active = Pod.objects.filter(workload_id__in=ids, phase__in=Pod.ACTIVE_PHASES)
    templates: dict[int, list[tuple[PodRequest, int]]] = defaultdict(list)
    for wid, *resources, count in (
        active.values_list("workload_id", *pod_resources.COLUMNS)
        .annotate(pods=Count("id"))
        .order_by()
    ):
        templates[wid].append((PodRequest.of(pod_resources.from_values(resources), uid=""), count))
    first = active.values("workload_id").annotate(first=Min("id")).values_list("first", flat=True)
    constraints = {
        wid: (frozenset(models), dict(selector), tolerations_from_json(tols))
        for wid, models, selector, tols in Pod.objects.filter(pk__in=list(first)).values_list(
            "workload_id",
            "constraints__gpu_models",
            "constraints__node_selector",
            "constraints__tolerations",
        )
    }
    return {
        wid: PodFacts(Demand.of_pods(pods), *constraints[wid]) for wid, pods in templates.items()
    }


def queued_workloads(
    setup: QueueSetup, *, limit: int | None = None, demand_in: Collection[str] | None = None
) -> list[tuple[Workload, QueuedWorkload | None]]:
    """Pending workloads (highest priority first, then oldest) as the admission cycle reads them;
    None for a workload whose LocalQueue does not exist. With `demand_in`, what their pods ask
    (demand, constraints, pod set shapes: a read of every pending pod) is read only for the
    workloads of those ClusterQueues; the others' are left empty (what only orders the queues
    needs no more: `pending_workloads`)."""
    query = (
        Workload.objects.filter(state=Workload.State.PENDING)
        .select_related("tenant")
        .defer("pod_sets")  # each template as submitted: never read here, up to 8 a workload
        .order_by("-priority", "created_at", "id")
    )
    rows = list(query[:limit] if limit else query)
    asked = rows
    if demand_in is not None:
        asked = [w for w in rows if _cluster_queue_of(setup, w) in demand_in]
    facts = pod_facts(w.pk for w in asked)
    shapes = pod_set_shapes(w.pk for w in asked)
    out: list[tuple[Workload, QueuedWorkload | None]] = []
    for w in rows:
        key = f"{w.tenant.namespace}/{w.queue_name}"
        lq = setup.local_queues.get(key)
        fact = facts.get(w.pk) or PodFacts(Demand(), frozenset(), {})
        out.append(
            (
                w,
                None
                if lq is None
                else QueuedWorkload(
                    key=str(w.pk),
                    cluster_queue=lq.cluster_queue,
                    local_queue=key,
                    priority=w.priority,
                    service_class=ServiceClass(w.service_class),
                    created_at=w.created_at.timestamp(),
                    demand=fact.demand,
                    gpu_models=fact.gpu_models,
                    node_selector=MappingProxyType(dict(fact.node_selector)),
                    can_preempt=w.preemption_policy != "Never",
                    tolerations=fact.tolerations,
                    active=w.active,
                    pod_sets=shapes.get(w.pk, ()),
                    requeue_at=w.requeue_at.timestamp() if w.requeue_at else 0.0,
                    label=f"{w.tenant.namespace}/{w.name}",
                ),
            )
        )
    return out


def _cluster_queue_of(setup: QueueSetup, workload: Workload) -> str | None:
    lq = setup.local_queues.get(f"{workload.tenant.namespace}/{workload.queue_name}")
    return lq.cluster_queue if lq is not None else None


def pod_set_shapes(workload_ids: Iterable[int]) -> dict[int, tuple[tuple[str, PodRequest], ...]]:
    """Per workload: one unfinished pod of each pod set as the core sees it (pod set name,
    request), in pod set order: what admission checks the flavors' nodes against."""
    first = (
        Pod.objects.filter(workload_id__in=list(workload_ids), phase__in=Pod.ACTIVE_PHASES)
        .values("workload_id", "pod_set")
        .annotate(first=Min("id"))
        .values_list("first", flat=True)
    )
    out: dict[int, list[tuple[str, PodRequest]]] = defaultdict(list)
    for pod in (
        Pod.objects.filter(pk__in=list(first))
        .select_related("workload__tenant", "constraints")
        .defer("workload__pod_sets")  # the templates as submitted, with every pod set's row
    ):
        out[pod.workload_id].append((pod.pod_set, pod_request(pod)))
    return {wid: tuple(sorted(sets, key=lambda s: s[0])) for wid, sets in out.items()}


def fair_share_idle_weight() -> float:
    """How much idle-held GPU counts in the fair share (scheduling.core.queueing.quota)."""
    return float(getattr(settings, "FAIR_SHARE_IDLE_WEIGHT", 1.0))


def admitted_workloads(usage_ratios: Mapping[str, float] | None = None) -> list[AdmittedWorkload]:
    """Every workload holding quota; with tenants' usage ratios (p95 used / requested), what each
    holds idle: its GPU quota usage times (1 - its tenant's ratio)."""
    ratios = usage_ratios or {}
    # Only the columns it needs: every cycle reads this several times, and whole rows (pod sets,
    # selectors and tolerations as JSON, model instances with their signals) cost more than the
    # rest of admission (the profile of bench_stack's scheduler).
    rows = (
        Workload.objects.filter(
            state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
            cluster_queue__isnull=False,
        )
        .order_by("admitted_at", "id")
        .values_list(
            "pk",
            "cluster_queue__name",
            "priority",
            "service_class",
            "created_at",
            "admitted_at",
            "quota_usage",
            "tenant__namespace",
            "tenant__name",
            "queue_name",
            "active",
        )
    )
    admitted = []
    for (
        pk,
        cluster_queue,
        priority,
        service_class,
        created_at,
        admitted_at,
        quota_usage,
        namespace,
        tenant,
        queue_name,
        active,
    ) in rows:
        usage = parse_usage(quota_usage)
        admitted.append(
            AdmittedWorkload(
                key=str(pk),
                cluster_queue=cluster_queue or "",
                priority=priority,
                service_class=ServiceClass(service_class),
                created_at=created_at.timestamp(),
                admitted_at=admitted_at.timestamp() if admitted_at else 0.0,
                usage=MappingProxyType(usage),
                local_queue=f"{namespace}/{queue_name}",
                idle=MappingProxyType(_idle(usage, ratios.get(tenant, 1.0))),
                active=active,
            )
        )
    return admitted


def _idle(usage: Mapping[FlavorResource, int], ratio: float) -> dict[FlavorResource, int]:
    return {fr: round(amount * (1.0 - ratio)) for fr, amount in usage.items() if fr[1] == GPU}


def quota_book(setup: QueueSetup, admitted: Sequence[AdmittedWorkload]) -> QuotaBook:
    book = QuotaBook(
        setup.cluster_queues.values(),
        cohorts=setup.cohorts.values(),
        idle_weight=fair_share_idle_weight(),
    )
    for a in admitted:
        if a.cluster_queue in book.queues:
            book.charge(a.cluster_queue, a.usage)
            book.charge_idle(a.cluster_queue, a.idle)
    return book
