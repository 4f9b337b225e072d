"""What every API view shares: the error shape in the schema, keyset paging, and the tenant /
admin base views (request fields: api/fields.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.views import APIView

from api.fields import QuerySerializer
from api.permissions import IsAdmin, IsTenant, tenant_of
from scheduling.models import Tenant

DEFAULT_LIMIT = 50
MAX_LIMIT = 500


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


class ConditionSerializer(serializers.Serializer):
    type = serializers.CharField()
    status = serializers.ChoiceField(choices=["True", "False", "Unknown"])
    reason = serializers.CharField()
    message = serializers.CharField(allow_blank=True)
    lastTransitionTime = serializers.DateTimeField(allow_null=True)


class PageSerializer(serializers.Serializer):
    nextCursor = serializers.CharField(allow_null=True)


class PageQuerySerializer(QuerySerializer):
    limit = serializers.IntegerField(min_value=1, max_value=MAX_LIMIT, default=DEFAULT_LIMIT)


def _cursor(pattern: str, max_length: int) -> serializers.RegexField:
    """A cursor: the key of the previous page's last item, in the form of the list's key."""
    return serializers.RegexField(
        pattern, required=False, max_length=max_length, help_text="nextCursor of the previous page"
    )


class IdPageQuerySerializer(PageQuerySerializer):
    """Lists keyed by id, newest first: the cursor is the last id seen."""

    cursor = _cursor(r"^[0-9]{1,18}$", 18)


class NamePageQuerySerializer(PageQuerySerializer):
    """Lists keyed by a Kubernetes object name: the cursor is the last name seen."""

    cursor = _cursor(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", 253)


def keyset_page(
    qs: QuerySet[Any], field: str, params: Mapping[str, Any], *, descending: bool
) -> tuple[list[Any], str | None]:
    """Keyset pagination on a unique `field`: the page after `cursor` (the last key of the
    previous page, so any well-formed cursor is a valid one), and the next cursor."""
    limit = params["limit"]
    if params.get("cursor"):
        after = int(params["cursor"]) if field == "id" else params["cursor"]
        qs = qs.filter(**{f"{field}__{'lt' if descending else 'gt'}": after})
    rows = list(qs[: limit + 1])
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, str(getattr(rows[-1], field)) if more and rows else None


class PositionPageQuerySerializer(IdPageQuerySerializer):
    """Lists in an order of their own (a queue's): the cursor is the last position seen, a
    number of the same form as an id."""


class QualifiedNamePageQuerySerializer(PageQuerySerializer):
    """Lists keyed by namespace/name: the cursor is the last one seen."""

    cursor = _cursor(
        r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$", 317
    )


def list_page(
    items: Sequence[Any], key: Callable[[Any], str | int], params: Mapping[str, Any]
) -> tuple[list[Any], str | None]:
    """keyset_page for a list built in memory: the items in the order of their unique `key`, the
    page after `cursor` (the last key of the previous page) and the next cursor."""
    rows = sorted(items, key=key)
    cursor = params.get("cursor")
    if cursor:
        rows = [r for r in rows if _after(key(r), cursor)]
    page = rows[: params["limit"]]
    return page, str(key(page[-1])) if len(rows) > len(page) and page else None


def _after(key: str | int, cursor: str) -> bool:
    return key > int(cursor) if isinstance(key, int) else key > cursor


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
    defaultRequests = serializers.DictField(child=serializers.CharField())
    minPerPod = serializers.DictField(child=serializers.CharField())
    maxPerPod = serializers.DictField(child=serializers.CharField())
