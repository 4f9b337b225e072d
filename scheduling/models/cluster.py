"""The cluster: tenants, nodes with their NUMA nodes and GPUs, and the admin's node actions."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from scheduling.core.types import SharingMode


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
