"""Workloads, their pods and the placement decisions recorded for them."""

from __future__ import annotations

import uuid

from django.db import models

from scheduling.core.types import ServiceClass, TopologyPolicy, TopologyScope
from scheduling.models.cluster import Tenant
from scheduling.models.queues import ClusterQueue


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
        # A batch/v1 Job the Kubernetes side runs as one workload (kube.jobs): its pods are the
        # Job controller's; evicted, the Job is suspended and the workload requeued, and the
        # pods the Job makes once it is admitted again fill the same Pod rows.
        JOB = "job"

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


class PodConstraints(models.Model):
    """What the filters read of a pod besides its resources (its node selector, tolerations and
    allowed GPU models), stored once per distinct content and referenced by its pods: a pod set's
    pods share one row, however many there are (a REST submit of 5,000 pods with maximal
    selectors stored 134 MB when each pod had its own copy). Keyed by a digest of the content,
    so pods mirrored from Kubernetes, where each pod may differ, share a row whenever they agree
    (services.pod_constraints_ids). Never changed once written."""

    digest = models.CharField(max_length=64, unique=True)  # sha256 of the canonical JSON
    node_selector = models.JSONField(default=dict)
    tolerations = models.JSONField(default=list)
    gpu_models = models.JSONField(default=list)

    def __str__(self) -> str:
        return self.digest[:12]


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
    constraints = models.ForeignKey(PodConstraints, on_delete=models.PROTECT, related_name="pods")
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
        indexes = [
            models.Index(fields=["phase", "priority", "created_at"]),
            # The few nominated pods, read every cycle (their nodes are held for them) without
            # reading every pending pod.
            models.Index(
                fields=["nominated_node"],
                condition=~models.Q(nominated_node=""),
                name="pod_nominated",
            ),
        ]

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
