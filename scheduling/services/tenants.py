"""Tenants."""

from __future__ import annotations

from scheduling.models import (
    Tenant,
)


def tenant_create(*, name: str, namespace: str | None = None) -> Tenant:
    return Tenant.objects.create(name=name, namespace=namespace or name)
