"""Admin: nodes, cordon, uncordon and drain. On a node the Kubernetes cluster manages the action
is the cluster's (scheduling.worker.node_actions): the answer is what the cluster said, 200 once
it answered, 202 with the action to read (GET admin/nodeactions/<id>) while it has not yet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
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
from scheduling.models import Gpu, Node, NodeAction

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


class NodeActionSerializer(serializers.Serializer):
    class ClusterNodeSerializer(serializers.Serializer):
        status = serializers.IntegerField(help_text="HTTP status of the Node's PATCH (200: done)")
        unschedulable = serializers.BooleanField(
            allow_null=True, help_text="spec.unschedulable as read back after it"
        )
        message = serializers.CharField(allow_blank=True)

    class ClusterPodSerializer(serializers.Serializer):
        pod = serializers.CharField(help_text="namespace/name")
        workload = serializers.CharField(help_text="namespace/name")
        status = serializers.CharField(
            help_text="the Eviction API's answer, e.g. 201, or 429 and the DisruptionBudget cause"
        )
        evicted = serializers.BooleanField(
            help_text="false: a pod of its workload was refused, the workload keeps its pods"
        )

    class AnswerSerializer(serializers.Serializer):
        node = serializers.DictField(required=False)
        pods = serializers.ListField(child=serializers.DictField(), required=False)

    id = serializers.IntegerField()
    node = serializers.CharField()
    kind = serializers.ChoiceField(choices=NodeAction.Kind.values)
    actor = serializers.CharField()
    requestedAt = serializers.DateTimeField()
    answeredAt = serializers.DateTimeField(allow_null=True)
    answer = AnswerSerializer(help_text="what the cluster said ({} until it answered)")


def _action_response(action: NodeAction) -> Response:
    doc = {
        "id": action.pk,
        "node": action.node,
        "kind": action.kind,
        "actor": action.actor,
        "requestedAt": action.requested_at,
        "answeredAt": action.answered_at,
        "answer": action.answer,
    }
    code = status.HTTP_200_OK if action.answered_at is not None else status.HTTP_202_ACCEPTED
    response = Response(NodeActionSerializer(doc).data, status=code)
    response["Location"] = f"/api/v1/admin/nodeactions/{action.pk}"
    return response


def _on_cluster(request: Request, node: Node, kind: str) -> Response:
    action = api_services.node_action(node=node, kind=kind, actor=request.user.get_username())
    return _action_response(action)


def _responses(ok: Any) -> dict[int, Any]:
    return {
        **documented(
            PolymorphicProxySerializer(
                component_name=f"{ok.__name__}OrClusterAnswer",
                serializers=[ok, NodeActionSerializer],
                resource_type_field_name=None,
            ),
            403,
            404,
        ),
        202: NodeActionSerializer,
    }


class NodeActionApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_action_retrieve",
        summary="A cordon, uncordon or drain of a Kubernetes node, and what the cluster said",
        responses=documented(NodeActionSerializer, 403, 404),
    )
    def get(self, request: Request, action_id: int) -> Response:
        return _action_response(selectors.node_action_get(action_id))


class NodeCordonApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_cordon",
        summary="Cordon a node: nothing new is placed on it (audited); on Kubernetes, the Node's "
        "spec.unschedulable",
        request=None,
        responses=_responses(NodeSerializer),
    )
    def post(self, request: Request, name: str) -> Response:
        node = selectors.node_get(name)
        if node.source == Node.Source.KUBERNETES:
            return _on_cluster(request, node, NodeAction.Kind.CORDON)
        node = api_services.node_cordon(node=node, cordoned=True, actor=request.user.get_username())
        return _node_response(node)


class NodeUncordonApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_uncordon",
        summary="Uncordon a node (audited)",
        request=None,
        responses=_responses(NodeSerializer),
    )
    def post(self, request: Request, name: str) -> Response:
        node = selectors.node_get(name)
        if node.source == Node.Source.KUBERNETES:
            return _on_cluster(request, node, NodeAction.Kind.UNCORDON)
        node = api_services.node_cordon(
            node=node, cordoned=False, actor=request.user.get_username()
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
        "(audited); on Kubernetes, the Eviction API for each pod (PodDisruptionBudgets honoured)",
        request=None,
        responses=_responses(OutputSerializer),
    )
    def post(self, request: Request, name: str) -> Response:
        node = selectors.node_get(name)
        if node.source == Node.Source.KUBERNETES:
            return _on_cluster(request, node, NodeAction.Kind.DRAIN)
        node, evicted = api_services.node_drain(node=node, actor=request.user.get_username())
        node.refresh_from_db()
        doc = {
            "node": _node_doc(node, selectors.node_gpus([node]).get(node.pk, [])),
            "evictedWorkloads": [f"{w.tenant.name}/{w.name}" for w in evicted],
        }
        return Response(NodeDrainApi.OutputSerializer(doc).data)
