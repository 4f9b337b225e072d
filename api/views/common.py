"""What every API view shares: the error shape in the schema, strict serializers, quantities,
keyset paging, and the tenant / admin base views."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from api.exceptions import InvalidInput
from api.permissions import IsAdmin, IsTenant, tenant_of
from scheduling.models import Tenant

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS_LABEL_MESSAGE = "must be a DNS label: lowercase letters, digits and '-', at most 63 characters"
DEFAULT_LIMIT = 50
MAX_LIMIT = 500
MAX_PODS_PER_WORKLOAD = 5000
MAX_USAGE_WINDOW = timedelta(days=7)


# --- shared pieces ------------------------------------------------------------------------------


class ErrorSerializer(serializers.Serializer):
    message = serializers.CharField()
    extra = serializers.DictField(child=serializers.JSONField())


def documented(ok: Any, *errors: int) -> dict[int, Any]:
    """An operation's documented responses: its success, 401 and 429 always, and `errors`."""
    documented: dict[int, Any] = {code: ErrorSerializer for code in (401, 429, *errors)}
    if isinstance(ok, dict):
        documented.update(ok)
    else:
        documented[200] = ok
    return documented


class StrictSerializer(serializers.Serializer):
    """Unknown keys are errors (a typo like `minCout` must not be ignored silently)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = sorted(str(k) for k in data if k not in self.fields)
            if unknown:
                raise serializers.ValidationError({k: ["unknown field"] for k in unknown})
        return super().to_internal_value(data)


def dns_label(**kwargs: Any) -> serializers.RegexField:
    return serializers.RegexField(
        DNS_LABEL, max_length=63, error_messages={"invalid": DNS_LABEL_MESSAGE}, **kwargs
    )


@extend_schema_field({"oneOf": [{"type": "string"}, {"type": "number"}], "example": "8"})
class QuantityField(serializers.Field):
    """A Kubernetes quantity, "8", "500m", "64Gi" (or a plain number); read by api.quantities."""

    default_error_messages = {"invalid": "must be a quantity string such as '8', '500m' or '64Gi'"}

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, bool) or not isinstance(data, str | int | float):
            self.fail("invalid")
        return data

    def to_representation(self, value: Any) -> Any:
        return str(value)


def quantity_map(**kwargs: Any) -> serializers.DictField:
    return serializers.DictField(child=QuantityField(), **kwargs)


class ConditionSerializer(serializers.Serializer):
    type = serializers.CharField()
    status = serializers.ChoiceField(choices=["True", "False", "Unknown"])
    reason = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    lastTransitionTime = serializers.DateTimeField(allow_null=True)


class PageSerializer(serializers.Serializer):
    nextCursor = serializers.CharField(allow_null=True)


def _cursor_encode(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


def _cursor_decode(text: str, kind: type) -> Any:
    try:
        value = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        value = None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise InvalidInput.one("cursor", "invalid cursor: pass nextCursor of the previous page")
    return value


class PageQuerySerializer(StrictSerializer):
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)
    cursor = serializers.CharField(required=False, max_length=512)


def keyset_page(
    qs: QuerySet[Any], field: str, params: Mapping[str, Any], *, descending: bool
) -> tuple[list[Any], str | None]:
    """Keyset pagination on a unique `field`: the page after `cursor`, and the next cursor."""
    limit = params["limit"]
    if params.get("cursor"):
        after = _cursor_decode(params["cursor"], int if field == "id" else str)
        qs = qs.filter(**{f"{field}__{'lt' if descending else 'gt'}": after})
    rows = list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, _cursor_encode(getattr(rows[-1], field)) if more and rows else None


def query_of(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
    serializer = serializer_class(data=request.query_params.dict())
    serializer.is_valid(raise_exception=True)
    return dict(serializer.validated_data)


class TenantApi(APIView):
    permission_classes: Sequence[type[BasePermission]] = [IsTenant]

    def tenant(self, request: Request) -> Tenant:
        tenant = tenant_of(request)
        assert tenant is not None  # IsTenant
        return tenant


class AdminApi(APIView):
    permission_classes: Sequence[type[BasePermission]] = [IsAdmin]


class LimitsSerializer(serializers.Serializer):
    defaultRequests = quantity_map(required=False, default=dict)
    minPerPod = quantity_map(required=False, default=dict)
    maxPerPod = quantity_map(required=False, default=dict)
