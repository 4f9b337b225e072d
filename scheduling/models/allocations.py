"""What pods hold: allocations on nodes and the GPUs (whole, shared or MIG) assigned to them."""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from scheduling.models.cluster import Gpu, Node
from scheduling.models.workloads import Pod


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
