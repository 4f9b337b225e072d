"""Admin: nodes, cordon, uncordon and drain."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api import selectors
from api import services as api_services
from api.views.common import (
    AdminApi,
    NamePageQuerySerializer,
    PageSerializer,
    documented,
    keyset_page,
    query_of,
)
from scheduling.models import Gpu, Node

# --- admin: nodes -------------------------------------------------------------------------------


class NodeSerializer(serializers.Serializer):
    class GpuSerializer(serializers.Serializer):
        index = serializers.IntegerField()
        uuid = serializers.CharField(allow_blank=True)
        model = serializers.CharField()
        memoryMiB = serializers.IntegerField()
        sharing = serializers.CharField()
        migLayout = serializers.ListField(child=serializers.CharField())
        usedMilli = serializers.IntegerField()

    class AmountSerializer(serializers.Serializer):
        allocatable = serializers.CharField()
        used = serializers.CharField()

    name = serializers.CharField()
    managedBy = serializers.CharField(help_text="simulator or kubernetes")
    cordoned = serializers.BooleanField()
    labels = serializers.DictField(child=serializers.CharField())
    taints = serializers.ListField(child=serializers.DictField(child=serializers.CharField()))
    cpu = AmountSerializer()
    memory = AmountSerializer()
    gpus = GpuSerializer(many=True)
    updatedAt = serializers.DateTimeField()


def _node_doc(node: Node, gpus: Sequence[Gpu]) -> dict[str, Any]:
    fmt = selectors.format_amount
    return {
        "name": node.name,
        "managedBy": node.source,
        "cordoned": node.cordoned,
        "labels": node.labels,
        "taints": node.taints,
        "cpu": {"allocatable": fmt("cpu", node.cpu_milli), "used": fmt("cpu", node.cpu_used_milli)},
        "memory": {
            "allocatable": fmt("memory", node.memory_mib),
            "used": fmt("memory", node.memory_used_mib),
        },
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "memoryMiB": g.memory_mib,
                "sharing": g.sharing,
                "migLayout": g.mig_layout,
                "usedMilli": g.used_milli,
            }
            for g in gpus
        ],
        "updatedAt": node.updated_at,
    }


def _node_response(node: Node) -> Response:
    node.refresh_from_db()
    gpus = selectors.node_gpus([node]).get(node.pk, [])
    return Response(NodeSerializer(_node_doc(node, gpus)).data)


class NodeListApi(AdminApi):
    class FilterSerializer(NamePageQuerySerializer):
        cordoned = serializers.BooleanField(required=False, allow_null=True, default=None)
        gpuModel = serializers.CharField(required=False, max_length=128)

    class OutputSerializer(PageSerializer):
        items = NodeSerializer(many=True)

    @extend_schema(
        operation_id="admin_node_list",
        summary="Nodes by name, with their GPUs and what is used",
        parameters=[FilterSerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(NodeListApi.FilterSerializer, request)
        qs = selectors.nodes_query(cordoned=params["cordoned"], gpu_model=params.get("gpuModel"))
        rows, next_cursor = keyset_page(qs, "name", params, descending=False)
        gpus = selectors.node_gpus(rows)
        items = [_node_doc(n, gpus.get(n.pk, [])) for n in rows]
        return Response(
            NodeListApi.OutputSerializer({"items": items, "nextCursor": next_cursor}).data
        )


class NodeDetailApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_retrieve",
        summary="One node",
        responses=documented(NodeSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        return _node_response(selectors.node_get(name))


class NodeCordonApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_cordon",
        summary="Cordon a node: nothing new is placed on it (audited)",
        request=None,
        responses=documented(NodeSerializer, 403, 404),
    )
    def post(self, request: Request, name: str) -> Response:
        node = api_services.node_cordon(
            node=selectors.node_get(name), cordoned=True, actor=request.user.get_username()
        )
        return _node_response(node)


class NodeUncordonApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_uncordon",
        summary="Uncordon a node (audited)",
        request=None,
        responses=documented(NodeSerializer, 403, 404),
    )
    def post(self, request: Request, name: str) -> Response:
        node = api_services.node_cordon(
            node=selectors.node_get(name), cordoned=False, actor=request.user.get_username()
        )
        return _node_response(node)


class NodeDrainApi(AdminApi):
    class OutputSerializer(serializers.Serializer):
        node = NodeSerializer()
        evictedWorkloads = serializers.ListField(
            child=serializers.CharField(),
            help_text="tenant/name of each workload evicted (requeued)",
        )

    @extend_schema(
        operation_id="admin_node_drain",
        summary="Drain a node: cordon it and evict (requeue) the workloads holding anything on it "
        "(audited)",
        request=None,
        responses=documented(OutputSerializer, 403, 404),
    )
    def post(self, request: Request, name: str) -> Response:
        node, evicted = api_services.node_drain(
            node=selectors.node_get(name), actor=request.user.get_username()
        )
        node.refresh_from_db()
        doc = {
            "node": _node_doc(node, selectors.node_gpus([node]).get(node.pk, [])),
            "evictedWorkloads": [f"{w.tenant.name}/{w.name}" for w in evicted],
        }
        return Response(NodeDrainApi.OutputSerializer(doc).data)
