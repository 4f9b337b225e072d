"""Cluster state and every allocation, durable in the database (one module: over 600 lines because
the tables' constraints below are read together).

Over-commit is impossible at the database level, whatever the number of scheduler replicas:
- each GPU carries `used_milli` under CHECK (0 <= used_milli <= 1000), incremented in the binding
  transaction, so a shared GPU can never hold more than one GPU's worth;
- a GPU held whole has an active `GpuAssignment` with `exclusive=True`, unique per GPU;
- a MIG slot has at most one active assignment;
- each node carries `cpu_used_milli` / `memory_used_mib`, and each of its NUMA nodes
  `cpu_used_milli` (`NodeNuma`), raised only by a checked update (`used + delta <= capacity`, the
  row locked by the UPDATE itself): a node may report less capacity than it holds (Kubernetes
  lowers allocatable under running pods), which must never stop its registration, but nothing
  more is ever placed on it until it is consistent (it is quarantined:
  scheduling.worker.cluster_state);
- a pod has at most one active allocation, and binding moves it from Pending only once;
- what a shared GPU lends to opportunistic pods out of its owners' idle capacity (reclaim,
  scheduling.core.reclaim) is counted apart, in `lent_milli` under CHECK (0 <= lent <= 1000):
  owners keep their `used_milli`, and a release that leaves more lent than owned moves lent pods
  onto the free capacity (services.allocations).

Allocation life cycle: reserved (counted, may expire: a gang still gathering) -> bound -> released.
"""

from __future__ import annotations

import uuid

from django.db import models
from django.db.models import Q

from scheduling.core.types import ServiceClass, SharingMode, TopologyPolicy, TopologyScope


class Tenant(models.Model):
    name = models.SlugField(max_length=63, unique=True)
    namespace = models.SlugField(max_length=63, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    class Source(models.TextChoices):
        SIMULATOR = "simulator"
        KUBERNETES = "kubernetes"

    name = models.CharField(max_length=253, unique=True)
    # Who registered it: the database side's simulated cluster or a Kubernetes cluster (no default:
    # every caller says which).
    source = models.CharField(max_length=16, choices=Source.choices)
    labels = models.JSONField(default=dict)
    taints = models.JSONField(default=list)  # [{"key", "value", "effect"}]
    cpu_milli = models.PositiveBigIntegerField()
    memory_mib = models.PositiveBigIntegerField()
    cpu_used_milli = models.BigIntegerField(default=0)
    memory_used_mib = models.BigIntegerField(default=0)
    cordoned = models.BooleanField(default=False)
    # {"gpu_numa": [...], "gpu_switch": [...], "links": [[...]], "numa_cpus": [...]}
    topology = models.JSONField(default=dict)
    # Why the scheduler places nothing here ("" when consistent): the recorded state contradicts
    # the node's capacity (scheduling.worker.cluster_state); cleared by itself once it no longer
    # does.
    quarantine_reason = models.CharField(max_length=512, blank=True, default="")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(cpu_used_milli__gte=0), name="node_cpu_used_positive"
            ),
            models.CheckConstraint(
                condition=Q(memory_used_mib__gte=0), name="node_memory_used_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.name


class NodeNuma(models.Model):
    """One NUMA node's share of its node's CPU (NodeTopology.numa_cpu_shares) and what placements
    charge to it (Placement.numa_cpu_milli)."""

    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="numa")
    index = models.PositiveSmallIntegerField()
    cpu_milli = models.PositiveBigIntegerField()
    cpu_used_milli = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="numa_index_unique_per_node"),
            models.CheckConstraint(
                condition=Q(cpu_used_milli__gte=0), name="numa_cpu_used_positive"
            ),
        ]
        ordering = ["node_id", "index"]

    def __str__(self) -> str:
        return f"{self.node_id}/numa{self.index}"


class Gpu(models.Model):
    node = models.ForeignKey(Node, on_delete=models.CASCADE, related_name="gpus")
    index = models.PositiveSmallIntegerField()
    uuid = models.CharField(max_length=96)
    model = models.CharField(max_length=128)
    memory_mib = models.PositiveIntegerField(default=0)
    sharing = models.CharField(
        max_length=16,
        choices=[(mode.value, mode.value) for mode in SharingMode],
        default=SharingMode.EXCLUSIVE.value,
    )
    mig_layout = models.JSONField(
        default=list
    )  # MIG instance profiles, e.g. ["3g.40gb", "1g.10gb"]
    used_milli = models.IntegerField(default=0)
    lent_milli = models.IntegerField(default=0)
    # The node still reports it. A GPU gone (unhealthy, removed) is kept, not deleted: the pods
    # that held it are still recorded against it, and it may come back.
    present = models.BooleanField(default=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["node", "index"], name="gpu_index_unique_per_node"),
            models.CheckConstraint(
                condition=Q(used_milli__gte=0) & Q(used_milli__lte=1000),
                name="gpu_not_overcommitted",
            ),
            models.CheckConstraint(
                condition=Q(lent_milli__gte=0) & Q(lent_milli__lte=1000),
                name="gpu_lends_at_most_one_gpu",
            ),
        ]
        ordering = ["node_id", "index"]

    def __str__(self) -> str:
        return f"{self.node.name}/gpu{self.index}"


# --- queues (Kueue's names and semantics; scheduling.core.queueing) ------------------------------


class ResourceFlavor(models.Model):
    """A kind of node, mostly a GPU model (`nvidia.com/gpu.product`): pods admitted with this
    flavor get its node labels as node selector and its tolerations."""

    name = models.CharField(max_length=63, unique=True)
    node_labels = models.JSONField(default=dict)
    node_taints = models.JSONField(default=list)  # [{"key", "value", "effect"}]
    tolerations = models.JSONField(default=list)  # [{"key", "operator", "value", "effect"}]
    topology_name = models.CharField(max_length=63, blank=True, default="")  # Kueue's, "": none
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Topology(models.Model):
    """Kueue's Topology: node labels, widest level first (scheduling.core.domains)."""

    name = models.CharField(max_length=63, unique=True)
    levels = models.JSONField(default=list)

    def __str__(self) -> str:
        return self.name


class ClusterQueue(models.Model):
    """Quota per flavor and resource, shared in a cohort. `resource_groups` is Kueue-shaped with
    amounts in canonical units (scheduling.core.queueing.resources: cpu milli, memory MiB,
    nvidia.com/gpu milli-GPU): [{"coveredResources": [...], "flavors": [{"name", "resources":
    [{"name", "nominalQuota", "borrowingLimit", "lendingLimit"}]}]}] (limits null when unset)."""

    class Strategy(models.TextChoices):
        STRICT_FIFO = "StrictFIFO"
        BEST_EFFORT_FIFO = "BestEffortFIFO"

    name = models.CharField(max_length=63, unique=True)
    cohort = models.CharField(max_length=63, blank=True, default="", db_index=True)
    queueing_strategy = models.CharField(
        max_length=16, choices=Strategy.choices, default=Strategy.BEST_EFFORT_FIFO
    )
    resource_groups = models.JSONField(default=list)
    within_cluster_queue = models.CharField(max_length=32, default="Never")
    reclaim_within_cohort = models.CharField(max_length=32, default="Never")
    borrow_within_cohort = models.CharField(max_length=32, default="Never")
    borrow_max_priority_threshold = models.IntegerField(null=True, blank=True)
    fair_sharing_weight = models.FloatField(default=1.0)
    # admissionScope.admissionMode, stopPolicy, flavorFungibility.whenCanBorrow (Kueue's values).
    admission_mode = models.CharField(max_length=40, default="NoAdmissionFairSharing")
    stop_policy = models.CharField(max_length=16, default="None")
    when_can_borrow = models.CharField(max_length=16, default="MayStopSearch")
    # namespaceSelector on kubernetes.io/metadata.name: [[operator, [values]]], [] = every one
    namespace_selector = models.JSONField(default=list, blank=True)
    # When the cluster it was mirrored from deleted it while it still held admitted workloads:
    # kept, terminating, until they are gone (services.queues_replace); None while it exists there.
    deleted_from_source_at = models.DateTimeField(null=True, blank=True)
    # Annotation gpusched.io/default-runtime, seconds: run-time prior of its workloads (issue 37)
    default_runtime_s = models.FloatField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Cohort(models.Model):
    """Kueue's Cohort: a node of a cohort tree with quota of its own (`resource_groups`, shaped
    and in units like ClusterQueue's), shared by the queues below it."""

    name = models.CharField(max_length=63, unique=True)
    parent_name = models.CharField(max_length=63, blank=True, default="")
    resource_groups = models.JSONField(default=list)
    fair_sharing_weight = models.FloatField(default=1.0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AdmissionFairSharingSettings(models.Model):
    """Kueue's Configuration.admissionFairSharing (one row; none: the core's defaults)."""

    usage_half_life_s = models.FloatField()
    usage_sampling_interval_s = models.FloatField()
    resource_weights = models.JSONField(default=dict)  # resource -> weight
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"half-life {self.usage_half_life_s}s, every {self.usage_sampling_interval_s}s"


class QueueSource(models.Model):
    """Where the queues come from, as the Kubernetes side last found (one row; none: `applyqueues`
    and the REST API, the database side's only source)."""

    class Kind(models.TextChoices):
        DATABASE = "database"  # applyqueues and the REST API
        CLUSTER = "cluster"  # Kueue's objects in the Kubernetes cluster, mirrored whole
        KUEUE = "kueue"  # Kueue admits; gpusched reads no queue objects and only places

    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.DATABASE)
    applied_at = models.DateTimeField(null=True, blank=True)  # the cluster's objects, last applied
    # Why the cluster's objects are refused now ("" when they are not): the last good queues stay.
    error = models.TextField(blank=True, default="")
    error_since = models.DateTimeField(null=True, blank=True)
    # What the last apply left out or kept back (a LocalQueue naming no ClusterQueue, a removed
    # ClusterQueue kept until its admitted workloads are gone).
    notes = models.JSONField(default=list, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.kind}{': ' + self.error if self.error else ''}"


class LocalQueue(models.Model):
    """A namespace's (tenant's) entry point to a cluster queue; workloads name it in queue_name."""

    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=63)
    cluster_queue = models.ForeignKey(
        ClusterQueue, on_delete=models.PROTECT, related_name="local_queues"
    )
    fair_sharing_weight = models.FloatField(default=1.0)
    stop_policy = models.CharField(max_length=16, default="None")
    # Admission fair sharing: the decayed usage of the queue's admitted workloads (resource ->
    # Kubernetes base units, entry penalties included) as of `usage_sampled_at`.
    consumed_resources = models.JSONField(default=dict, blank=True)
    usage_sampled_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["namespace", "name"], name="local_queue_unique_per_namespace"
            ),
        ]
        ordering = ["namespace", "name"]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class PriorityClass(models.Model):
    """Kueue's WorkloadPriorityClass / Kubernetes' PriorityClass (`kind`): a named priority value,
    and whether workloads of the class may preempt others. A name may exist once per kind."""

    class Preemption(models.TextChoices):
        PREEMPT_LOWER_PRIORITY = "PreemptLowerPriority"
        NEVER = "Never"

    class Kind(models.TextChoices):
        WORKLOAD = "WorkloadPriorityClass"
        POD = "PriorityClass"

    name = models.CharField(max_length=63)
    kind = models.CharField(max_length=24, choices=Kind.choices, default=Kind.WORKLOAD)
    value = models.IntegerField()
    preemption_policy = models.CharField(
        max_length=24, choices=Preemption.choices, default=Preemption.PREEMPT_LOWER_PRIORITY
    )
    description = models.CharField(max_length=256, blank=True, default="")
    global_default = models.BooleanField(default=False)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["kind", "name"], name="priority_class_unique_per_kind")
        ]
        ordering = ["-value", "name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class Workload(models.Model):
    """A tenant's job: one or more pod sets, admitted and placed together (Kueue's Workload)."""

    class State(models.TextChoices):
        PENDING = "Pending"  # waiting for admission (quota)
        ADMITTED = "Admitted"  # quota reserved; pods being placed
        RUNNING = "Running"
        FINISHED = "Finished"
        FAILED = "Failed"
        CANCELLED = "Cancelled"

    ACTIVE_STATES = (State.PENDING, State.ADMITTED, State.RUNNING)

    class Origin(models.TextChoices):
        # Submitted to gpusched (REST API, simulator): gpusched owns its pods' lifecycle, so an
        # evicted workload is requeued and its pods made again.
        SUBMITTED = "submitted"
        # Mirrored from pods someone created in a Kubernetes cluster: an evicted pod is gone for
        # good (its controller, if any, makes a new one), so an evicted workload ends.
        MIRRORED = "mirrored"

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="workloads")
    origin = models.CharField(max_length=16, choices=Origin.choices, default=Origin.SUBMITTED)
    name = models.CharField(max_length=253)
    queue_name = models.CharField(max_length=63, default="default")
    priority = models.IntegerField(default=0)
    priority_class_name = models.CharField(max_length=63, blank=True, default="")
    priority_class_kind = models.CharField(max_length=24, blank=True, default="")
    # Kueue's spec.active: false evicts the workload (InactiveWorkload) and keeps it unadmitted.
    active = models.BooleanField(default=True)
    service_class = models.CharField(
        max_length=16,
        choices=[(c.value, c.value) for c in ServiceClass],
        default=ServiceClass.BATCH.value,
    )
    pod_sets = models.JSONField(
        default=list
    )  # as submitted: [{"name", "count", "minCount", "template"}]
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    reason = models.CharField(max_length=1024, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Admission (Kueue's status.admission): the cluster queue whose quota it holds, the flavor per
    # resource, and the quota charged ({"flavor|resource": canonical amount}). The pods of an
    # admitted workload get `node_selector` / `tolerations` of its flavors.
    cluster_queue = models.ForeignKey(
        ClusterQueue,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="workloads",
    )
    flavors = models.JSONField(default=dict, blank=True)  # resource -> flavor
    quota_usage = models.JSONField(default=dict, blank=True)
    node_selector = models.JSONField(default=dict, blank=True)
    tolerations = models.JSONField(default=list, blank=True)
    topology = models.JSONField(default=dict, blank=True)  # its flavor's {"name", "levels"}
    # Why it waits: WaitingForQuota, NoMatchingFlavor, ExceedsMaxQuota, Inadmissible, NoFit,
    # TopologyPlacementFailed, WaitingForGang, Preempted, InactiveWorkload, ClusterQueueStopped,
    # LocalQueueStopped ("" when nothing holds it back);
    # `reason` carries the message.
    pending_reason = models.CharField(max_length=32, blank=True, default="")
    preemption_policy = models.CharField(max_length=24, default="PreemptLowerPriority")
    maximum_execution_time_s = models.PositiveIntegerField(null=True, blank=True)
    evictions = models.PositiveIntegerField(default=0)
    evicted_at = models.DateTimeField(null=True, blank=True)
    # Why it was last evicted (Kueue's Evicted condition reason: Preempted, PodsReadyTimeout,
    # InactiveWorkload, ClusterQueueStopped, LocalQueueStopped); kept after it is requeued.
    eviction_reason = models.CharField(max_length=32, blank=True, default="")
    # Kueue's status.requeueState: how often its pods were not ready in time, and when it may be
    # queued again (the backoff after the last such eviction; null: at once).
    requeue_count = models.PositiveIntegerField(default=0)
    requeue_at = models.DateTimeField(null=True, blank=True)
    # What the scheduler predicts while it waits (issue 18; scheduling.services.estimates),
    # recomputed every few seconds by the cycle: run time learnt from finished workloads, and the
    # estimated start from replaying the queue (or why it is unknown).
    runtime_p50_s = models.FloatField(null=True, blank=True)
    runtime_p90_s = models.FloatField(null=True, blank=True)
    runtime_basis = models.CharField(max_length=256, blank=True, default="")
    start_p50 = models.DateTimeField(null=True, blank=True)
    start_p90 = models.DateTimeField(null=True, blank=True)
    start_unknown_reason = models.CharField(max_length=256, blank=True, default="")
    estimated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "name"], name="workload_name_unique_per_tenant"
            ),
        ]
        indexes = [models.Index(fields=["state", "priority", "created_at"])]

    def __str__(self) -> str:
        return f"{self.tenant.name}/{self.name}"


class Pod(models.Model):
    class Phase(models.TextChoices):
        PENDING = "Pending"  # waiting for a node
        BOUND = "Bound"  # placed; the simulator (or kubelet) starts it
        RUNNING = "Running"
        # Evicted, and still holding what it holds until the cluster says it is gone
        # (Kubernetes: its termination grace period); then Pending again (requeued) or Failed.
        TERMINATING = "Terminating"
        SUCCEEDED = "Succeeded"
        FAILED = "Failed"
        CANCELLED = "Cancelled"

    ACTIVE_PHASES = (Phase.PENDING, Phase.BOUND, Phase.RUNNING, Phase.TERMINATING)
    PLACED_PHASES = (Phase.BOUND, Phase.RUNNING)

    uid = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    workload = models.ForeignKey(Workload, on_delete=models.CASCADE, related_name="pods")
    name = models.CharField(max_length=253)
    pod_set = models.CharField(max_length=63)
    phase = models.CharField(max_length=16, choices=Phase.choices, default=Phase.PENDING)
    priority = models.IntegerField(default=0)
    service_class = models.CharField(max_length=16, default=ServiceClass.BATCH.value)
    cpu_milli = models.PositiveBigIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    gpus = models.PositiveSmallIntegerField(default=0)
    gpu_milli = models.PositiveSmallIntegerField(default=0)
    mig_profile = models.CharField(max_length=32, blank=True, default="")
    mig_count = models.PositiveSmallIntegerField(default=0)
    gpu_models = models.JSONField(default=list)
    # Extended resources per pod (`example.com/credits`: whole units), counted against quota.
    extended_resources = models.JSONField(default=dict, blank=True)
    topology_policy = models.CharField(  # "": the pod named none (the profile's default holds)
        max_length=24,
        blank=True,
        default="",
        choices=[(p.value, p.value) for p in TopologyPolicy],
    )
    topology_scope = models.CharField(
        max_length=8, blank=True, default="", choices=[(s.value, s.value) for s in TopologyScope]
    )
    node_selector = models.JSONField(default=dict)
    tolerations = models.JSONField(default=list)
    topology_request = models.JSONField(default=dict, blank=True)  # domains.DomainAsk.json()
    gang_min_count = models.PositiveIntegerField(
        default=0
    )  # > 0: the pod set is placed all or nothing
    # The pod runs in a real cluster (Kubernetes), which says when it is gone: evicted or
    # cancelled, it keeps what it holds (Terminating) until then. Off in the database world.
    cluster_managed = models.BooleanField(default=False)
    attempts = models.PositiveIntegerField(default=0)
    last_reason = models.CharField(max_length=1024, blank=True, default="")
    # The node a preemption is emptying for this pod while its victims terminate there
    # (kube-scheduler's status.nominatedNodeName): kept across cycles so it waits for them
    # rather than preempting again; cleared when it is bound or requeued.
    nominated_node = models.CharField(max_length=253, blank=True, default="")
    # Why the last attempt failed, structured (scheduling/services/decisions.py `why_pending`,
    # read by scheduling/selectors/why_pending.py): current while its "summary" equals last_reason,
    # which every other writer of last_reason (binding, eviction, a refused bind) changes.
    pending_explanation = models.JSONField(default=dict, blank=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)  # backoff after a failed attempt
    created_at = models.DateTimeField(auto_now_add=True)
    bound_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "name"], name="pod_name_unique_per_workload"
            ),
        ]
        indexes = [models.Index(fields=["phase", "priority", "created_at"])]

    def __str__(self) -> str:
        return self.name


class PlacementDecision(models.Model):
    """Why a pod went where it went, or why it still waits: the scheduler's explanation of one
    attempt (per node and plugin, for the best candidates). Bounded: old rows are pruned."""

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="decisions")
    node = models.CharField(max_length=253, blank=True, default="")
    outcome = models.CharField(max_length=32)  # a status code: Success, Unschedulable, ...
    summary = models.CharField(max_length=1024)
    explanation = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    def __str__(self) -> str:
        return f"{self.outcome} {self.node or '-'}"


class Allocation(models.Model):
    class State(models.TextChoices):
        RESERVED = "reserved"
        BOUND = "bound"
        RELEASED = "released"

    pod = models.ForeignKey(Pod, on_delete=models.CASCADE, related_name="allocations")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="allocations")
    state = models.CharField(max_length=16, choices=State.choices, default=State.RESERVED)
    active = models.BooleanField(default=True)  # reserved or bound; kept in step with `state`
    cpu_milli = models.PositiveBigIntegerField(default=0)
    memory_mib = models.PositiveBigIntegerField(default=0)
    numa_cpu_milli = models.JSONField(default=list)
    scope = models.CharField(max_length=8, blank=True, default="")
    scheduler = models.CharField(max_length=128, blank=True, default="")  # holder id of the binder
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)  # reservations only
    bound_at = models.DateTimeField(null=True, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    release_reason = models.CharField(max_length=256, blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["pod"], condition=Q(active=True), name="one_active_allocation_per_pod"
            ),
            models.CheckConstraint(
                condition=Q(active=True, state__in=["reserved", "bound"])
                | Q(active=False, state="released"),
                name="allocation_active_matches_state",
            ),
        ]
        indexes = [models.Index(fields=["active", "node"])]

    def __str__(self) -> str:
        return f"{self.state} on node {self.node_id}"


class GpuAssignment(models.Model):
    """One GPU (or MIG slot) of an allocation. Active rows are what the GPU currently holds."""

    allocation = models.ForeignKey(Allocation, on_delete=models.CASCADE, related_name="gpus")
    gpu = models.ForeignKey(Gpu, on_delete=models.PROTECT, related_name="assignments")
    milli = models.PositiveSmallIntegerField()
    exclusive = models.BooleanField(default=False)
    mig_slot = models.SmallIntegerField(null=True, blank=True)
    active = models.BooleanField(default=True)
    reclaimed = models.BooleanField(default=False)  # on capacity lent by the GPU's owners

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["gpu"],
                condition=Q(active=True, exclusive=True),
                name="one_exclusive_holder_per_gpu",
            ),
            models.UniqueConstraint(
                fields=["gpu", "mig_slot"],
                condition=Q(active=True, mig_slot__isnull=False),
                name="one_holder_per_mig_slot",
            ),
        ]

    def __str__(self) -> str:
        return f"gpu {self.gpu_id}: {self.milli} milli"


class Event(models.Model):
    """The outbox: one row per state change, written in the transaction that made the change. Ids
    grow in commit order (on PostgreSQL a deferred trigger gives each row its id at COMMIT, one
    writer at a time: migration 0013), so readers tail by id."""

    type = models.CharField(max_length=64)
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.pk} {self.type}"


class Lease(models.Model):
    """Leader election among scheduler replicas: the holder renews; others take over on expiry."""

    name = models.CharField(max_length=63, unique=True)
    holder = models.CharField(max_length=128, blank=True, default="")
    renewed_at = models.DateTimeField(null=True, blank=True)
    acquired_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(default=15.0)
    transitions = models.PositiveIntegerField(default=0)

    def __str__(self) -> str:
        return f"{self.name}: {self.holder or 'free'}"


class NodeAction(models.Model):
    """An admin's cordon, uncordon or drain of a node the cluster manages (Node.Source.KUBERNETES):
    asked here by the REST API or the dashboard, carried out by the scheduler's next cycle against
    the cluster (the one holding its connection), which records what the cluster answered."""

    class Kind(models.TextChoices):
        CORDON = "cordon"
        UNCORDON = "uncordon"
        DRAIN = "drain"

    node = models.CharField(max_length=253)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    actor = models.CharField(max_length=150)
    requested_at = models.DateTimeField()
    answered_at = models.DateTimeField(null=True, blank=True)
    # What the cluster said: {"node": {"status", "unschedulable", "message"}, "pods": [{"pod",
    # "status", "message", "evicted"}]} (kube.side.KubernetesSide.cordon, its evictions).
    answer = models.JSONField(default=dict, blank=True)

    class Meta:
        indexes = [models.Index(fields=["answered_at", "id"], name="node_action_open")]

    def __str__(self) -> str:
        return f"{self.kind} {self.node} ({'answered' if self.answered_at else 'asked'})"
