"""`Authorization: Bearer <token>`: a tenant's token (request.user is a TenantPrincipal) or an admin
user's (request.user is that user). A missing header leaves the request anonymous (401 from the
permission check); a malformed, unknown or revoked token is a 401 at once."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions
from rest_framework.request import Request

from api.models import ApiToken
from scheduling.models import Tenant

TOKEN_PREFIX = "gst_"
LAST_USED_RESOLUTION = timedelta(minutes=1)  # at most one write per token and minute


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class TenantPrincipal:
    """Who a tenant token speaks for. Shaped enough like a user for DRF's checks."""

    tenant: Tenant
    token_id: int

    is_authenticated = True
    is_anonymous = False
    is_active = True
    is_staff = False
    is_superuser = False

    @property
    def pk(self) -> None:
        return None

    def __str__(self) -> str:
        return f"tenant {self.tenant.name}"


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request: Request) -> tuple[Any, ApiToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: expected 'Bearer <token>'."
            )
        try:
            token = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("Invalid token.") from exc
        row = (
            ApiToken.objects.select_related("tenant", "user")
            .filter(digest=token_digest(token))
            .first()
        )
        if row is None:
            raise exceptions.AuthenticationFailed("Invalid token.")
        if row.revoked_at is not None:
            raise exceptions.AuthenticationFailed("Token revoked.")
        now = timezone.now()
        if row.last_used_at is None or now - row.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=row.pk).update(last_used_at=now)
            row.last_used_at = now
        if row.tenant is not None:
            return TenantPrincipal(row.tenant, row.pk), row
        assert row.user is not None
        if not row.user.is_active:
            raise exceptions.AuthenticationFailed("User inactive or deleted.")
        return row.user, row

    def authenticate_header(self, request: Request) -> str:
        return f'{self.keyword} realm="api"'


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "description": "A tenant or admin API token."}
