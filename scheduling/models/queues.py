"""Queues as Kueue has them: flavors, topologies, cluster and local queues, cohorts, priority
classes, and where the queues come from."""

from __future__ import annotations

from django.db import models


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
    # Annotation gpusched.io/consolidation: Allowed, or Never (kept out of consolidation, issue 37)
    consolidation = models.CharField(max_length=16, default="Allowed")
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
