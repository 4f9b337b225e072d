"""Admin: tenants, their policies and API tokens."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from api import selectors
from api import services as api_services
from api.exceptions import NotFound
from api.fields import (
    ResourceMapField,
    StrictSerializer,
    dns_label,
)
from api.models import ApiToken
from api.views.common import (
    AdminApi,
    NamePageQuerySerializer,
    PageSerializer,
    PositionPageQuerySerializer,
    documented,
    keyset_page,
    list_page,
    query_of,
)
from api.views.usage import TenantQuotaApi, quota_doc

# --- admin: tenants and tokens ------------------------------------------------------------------


class PolicySerializer(serializers.Serializer):
    queueName = serializers.CharField()
    defaultRequests = serializers.DictField(child=serializers.CharField())
    minPerPod = serializers.DictField(child=serializers.CharField())
    maxPerPod = serializers.DictField(child=serializers.CharField())


class TenantSerializer(serializers.Serializer):
    name = serializers.CharField()
    namespace = serializers.CharField()
    queueNames = serializers.ListField(child=serializers.CharField())
    activeWorkloads = serializers.IntegerField()
    tokens = serializers.IntegerField(help_text="tokens not revoked")
    createdAt = serializers.DateTimeField()
    policy = PolicySerializer(allow_null=True)


def _tenant_doc(s: selectors.TenantSummary) -> dict[str, Any]:
    p = s.policy
    return {
        "name": s.tenant.name,
        "namespace": s.tenant.namespace,
        "queueNames": s.queue_names,
        "activeWorkloads": s.active_workloads,
        "tokens": s.tokens,
        "createdAt": s.tenant.created_at,
        "policy": None
        if p is None
        else {
            "queueName": p.queue_name,
            "defaultRequests": p.default_requests,
            "minPerPod": p.min_per_pod,
            "maxPerPod": p.max_per_pod,
        },
    }


class TenantListApi(AdminApi):
    class OutputSerializer(PageSerializer):
        items = TenantSerializer(many=True)

    @extend_schema(
        operation_id="admin_tenant_list",
        summary="Every tenant, by name",
        parameters=[NamePageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(NamePageQuerySerializer, request)
        page, next_cursor = list_page(
            selectors.tenants_list(), lambda s: str(s.tenant.name), params
        )
        items = [_tenant_doc(s) for s in page]
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(TenantListApi.OutputSerializer(doc).data)


class TenantCreateApi(AdminApi):
    class InputSerializer(StrictSerializer):
        name = dns_label()
        namespace = dns_label(required=False)
        queueName = dns_label(
            required=False, help_text="its LocalQueue; default: the tenant's name"
        )
        quota = ResourceMapField(
            required=False,
            default=dict,
            help_text="nominal quota of the tenant's own ClusterQueue, e.g. nvidia.com/gpu: '16'",
        )
        cohortName = dns_label(required=False, default="")
        flavor = dns_label(required=False, help_text="ResourceFlavor of the quota")
        clusterQueue = dns_label(
            required=False, help_text="share this existing ClusterQueue instead of a new one"
        )
        defaultRequests = ResourceMapField(required=False, default=dict)
        minPerPod = ResourceMapField(required=False, default=dict)
        maxPerPod = ResourceMapField(required=False, default=dict)

    class OutputSerializer(serializers.Serializer):
        tenant = TenantSerializer()
        token = serializers.CharField(help_text="shown once; only its digest is stored")
        queueName = serializers.CharField()

    @extend_schema(
        operation_id="admin_tenant_create",
        summary="Create a tenant with its queue, limits and first API token",
        request=InputSerializer,
        responses=documented({201: OutputSerializer}, 400, 403, 409, 413, 422),
    )
    def post(self, request: Request) -> Response:
        serializer = TenantCreateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        tenant, policy, token = api_services.tenant_onboard(
            name=data["name"],
            namespace=data.get("namespace"),
            queue_name=data.get("queueName"),
            quota=data["quota"],
            cohort=data["cohortName"],
            cluster_queue=data.get("clusterQueue"),
            flavor=data.get("flavor"),
            default_requests=data["defaultRequests"],
            min_per_pod=data["minPerPod"],
            max_per_pod=data["maxPerPod"],
        )
        doc = {
            "tenant": _tenant_doc(selectors.tenant_summary(tenant)),
            "token": token,
            "queueName": policy.queue_name,
        }
        return Response(TenantCreateApi.OutputSerializer(doc).data, status=status.HTTP_201_CREATED)


class TenantsApi(TenantListApi, TenantCreateApi):  # type: ignore[misc]
    """Routing only: GET lists (TenantListApi), POST creates (TenantCreateApi)."""


class TenantDetailApi(AdminApi):
    @extend_schema(
        operation_id="admin_tenant_retrieve",
        summary="One tenant",
        responses=documented(TenantSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        summary = selectors.tenant_summary(selectors.tenant_get(name))
        return Response(TenantSerializer(_tenant_doc(summary)).data)


class TenantPolicyUpdateApi(AdminApi):
    class InputSerializer(StrictSerializer):
        queueName = dns_label(required=False)
        defaultRequests = ResourceMapField(required=False, default=dict)
        minPerPod = ResourceMapField(required=False, default=dict)
        maxPerPod = ResourceMapField(required=False, default=dict)

    @extend_schema(
        operation_id="admin_tenant_policy_update",
        summary="Replace a tenant's per-pod limits (LimitRange-like); its quota is its "
        "ClusterQueue's",
        request=InputSerializer,
        responses=documented(TenantSerializer, 400, 403, 404, 413, 422),
    )
    def put(self, request: Request, name: str) -> Response:
        tenant = selectors.tenant_get(name)
        serializer = TenantPolicyUpdateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        api_services.tenant_policy_set(
            tenant=tenant,
            queue_name=data.get("queueName"),
            default_requests=data["defaultRequests"],
            min_per_pod=data["minPerPod"],
            max_per_pod=data["maxPerPod"],
        )
        return Response(TenantSerializer(_tenant_doc(selectors.tenant_summary(tenant))).data)


class TenantQuotaUpdateApi(AdminApi):
    class InputSerializer(StrictSerializer):
        quota = ResourceMapField(
            help_text="new nominal quota per resource, e.g. nvidia.com/gpu: '24'; the queue's "
            "other resources and limits stay"
        )
        clusterQueue = dns_label(
            required=False, help_text="which of the tenant's ClusterQueues, when it feeds several"
        )
        flavor = dns_label(
            required=False, help_text="which ResourceFlavor; default: the queue's one flavor"
        )

    class OutputSerializer(serializers.Serializer):
        class ChangeSerializer(serializers.Serializer):
            clusterQueue = serializers.CharField()
            flavor = serializers.CharField()
            nominalQuota = serializers.DictField(
                child=serializers.DictField(child=serializers.CharField()),
                help_text="per resource changed: {from, to}",
            )

        changed = ChangeSerializer()
        quota = TenantQuotaApi.OutputSerializer()

    @extend_schema(
        operation_id="admin_tenant_quota_update",
        summary="Change a tenant's quota: its ClusterQueue's nominal quota (shared with the "
        "queue's other tenants), audited",
        request=InputSerializer,
        responses=documented(OutputSerializer, 400, 403, 404, 409, 413, 422),
    )
    def put(self, request: Request, name: str) -> Response:
        tenant = selectors.tenant_get(name)
        serializer = TenantQuotaUpdateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        changed = api_services.tenant_quota_set(
            tenant=tenant,
            quota=data["quota"],
            cluster_queue=data.get("clusterQueue"),
            flavor=data.get("flavor"),
            actor=request.user.get_username(),
        )
        doc = {"changed": changed, "quota": quota_doc(tenant)}
        return Response(TenantQuotaUpdateApi.OutputSerializer(doc).data)


class TokenSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField(allow_blank=True)
    prefix = serializers.CharField()
    createdAt = serializers.DateTimeField()
    lastUsedAt = serializers.DateTimeField(allow_null=True)
    revokedAt = serializers.DateTimeField(allow_null=True)


def _token_doc(t: ApiToken) -> dict[str, Any]:
    return {
        "id": t.pk,
        "name": t.name,
        "prefix": t.prefix,
        "createdAt": t.created_at,
        "lastUsedAt": t.last_used_at,
        "revokedAt": t.revoked_at,
    }


class TenantTokenListApi(AdminApi):
    class OutputSerializer(PageSerializer):
        items = TokenSerializer(many=True)

    @extend_schema(
        operation_id="admin_tenant_token_list",
        summary="A tenant's API tokens (never the tokens themselves), oldest first",
        parameters=[PositionPageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        params = query_of(PositionPageQuerySerializer, request)
        tokens, next_cursor = keyset_page(
            selectors.tenant_tokens(selectors.tenant_get(name)), "id", params, descending=False
        )
        items = [_token_doc(t) for t in tokens]
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(TenantTokenListApi.OutputSerializer(doc).data)


class TenantTokenCreateApi(AdminApi):
    class InputSerializer(StrictSerializer):
        name = serializers.CharField(max_length=63, required=False, default="", allow_blank=True)

    class OutputSerializer(TokenSerializer):
        token = serializers.CharField(help_text="shown once; only its digest is stored")

    @extend_schema(
        operation_id="admin_tenant_token_create",
        summary="Issue a new API token for a tenant",
        request=InputSerializer,
        responses=documented({201: OutputSerializer}, 400, 403, 404, 413),
    )
    def post(self, request: Request, name: str) -> Response:
        tenant = selectors.tenant_get(name)
        serializer = TenantTokenCreateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        row, token = api_services.token_create(
            tenant=tenant, name=serializer.validated_data["name"]
        )
        doc = {**_token_doc(row), "token": token}
        return Response(
            TenantTokenCreateApi.OutputSerializer(doc).data, status=status.HTTP_201_CREATED
        )


class TenantTokensApi(TenantTokenListApi, TenantTokenCreateApi):  # type: ignore[misc]
    """Routing only: GET lists (TenantTokenListApi), POST issues (TenantTokenCreateApi)."""


class TokenRevokeApi(AdminApi):
    @extend_schema(
        operation_id="admin_token_revoke",
        summary="Revoke an API token (tenant or admin): it stops working at once",
        request=None,
        responses=documented(TokenSerializer, 403, 404),
    )
    def post(self, request: Request, token_id: int) -> Response:
        token = ApiToken.objects.filter(pk=token_id).first()
        if token is None:
            raise NotFound(f"token {token_id} not found")
        return Response(TokenSerializer(_token_doc(api_services.token_revoke(token=token))).data)
