"""What the REST API keeps of its own: API tokens, tenant limits, idempotency keys.

Tokens are stored as SHA-256 digests only; the token itself is shown once, when it is created.
(A slow password hash is not needed: tokens are 256 random bits, not something a person chose.)
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from scheduling.models import Tenant


class ApiToken(models.Model):
    """A bearer token of a tenant, or of an admin user (exactly one of the two)."""

    tenant = models.ForeignKey(
        Tenant, null=True, blank=True, on_delete=models.CASCADE, related_name="api_tokens"
    )
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="api_tokens",
    )
    name = models.CharField(max_length=63, blank=True, default="")
    prefix = models.CharField(max_length=16)  # the token's first characters, to tell tokens apart
    digest = models.CharField(max_length=64, unique=True)  # sha256 hex of the whole token
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(tenant__isnull=False, user__isnull=True)
                | Q(tenant__isnull=True, user__isnull=False),
                name="api_token_tenant_xor_user",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant or self.user})"


class TenantPolicy(models.Model):
    """A tenant's limits in the spirit of Kubernetes LimitRange and ResourceQuota, and its queue.

    Quantities are kept as the Kubernetes strings the admin gave (validated when written):
    `default_requests` fill in what a pod template omits, `min_per_pod` / `max_per_pod` bound each
    pod. The tenant's quota is its ClusterQueue's (nominal quota, checked at admission): one
    story, shown by /quota.
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="api_policy")
    # The tenant's default LocalQueue (scheduling.models.LocalQueue, made with the tenant): listed
    # first among its namespace's queues, and where a workload naming no queue goes.
    queue_name = models.CharField(max_length=63)
    default_requests = models.JSONField(default=dict, blank=True)
    min_per_pod = models.JSONField(default=dict, blank=True)
    max_per_pod = models.JSONField(default=dict, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "tenant policies"

    def __str__(self) -> str:
        return f"policy of {self.tenant}"


class IdempotencyKey(models.Model):
    """A submit made with an `Idempotency-Key` header: repeating it returns the same workload."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=255)
    fingerprint = models.CharField(max_length=64)  # sha256 of the request body, canonical JSON
    workload_name = models.CharField(max_length=253)  # unique per tenant, so it names the workload
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key"], name="idempotency_key_per_tenant"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant_id}:{self.key}"
