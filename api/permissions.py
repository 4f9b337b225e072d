"""Who may call what: tenants their own endpoints, admins (staff users) the admin endpoints."""

from __future__ import annotations

from typing import Any

from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from api.authentication import TenantPrincipal
from scheduling.models import Tenant


def tenant_of(request: Request) -> Tenant | None:
    user: Any = request.user
    return user.tenant if isinstance(user, TenantPrincipal) else None


def is_admin(request: Request) -> bool:
    user: Any = request.user
    return bool(
        user is not None
        and not isinstance(user, TenantPrincipal)
        and user.is_authenticated
        and user.is_staff
    )


class IsTenant(BasePermission):
    message = "This endpoint needs a tenant's API token."

    def has_permission(self, request: Request, view: Any) -> bool:
        return tenant_of(request) is not None


class IsAdmin(BasePermission):
    message = "This endpoint needs an admin (staff user) session or token."

    def has_permission(self, request: Request, view: Any) -> bool:
        return is_admin(request)
