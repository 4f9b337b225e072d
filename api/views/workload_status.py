"""A workload's pods, the scheduler's placement decisions for them, and why it waits."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api import selectors
from api.views.common import (
    IdPageQuerySerializer,
    PageSerializer,
    PositionPageQuerySerializer,
    TenantApi,
    documented,
    keyset_page,
    query_of,
)
from scheduling import pod_resources
from scheduling.core import resource_requests
from scheduling.models import Pod


class PodGpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField(allow_blank=True)
    model = serializers.CharField(allow_blank=True)
    milli = serializers.IntegerField()
    migSlot = serializers.IntegerField(allow_null=True)


class WorkloadPodsApi(TenantApi):
    class OutputSerializer(PageSerializer):
        class PodSerializer(serializers.Serializer):
            name = serializers.CharField()
            podSet = serializers.CharField()
            phase = serializers.ChoiceField(choices=Pod.Phase.values)
            requests = serializers.DictField(child=serializers.CharField())
            node = serializers.CharField(allow_null=True)
            allocation = serializers.CharField(allow_null=True, help_text="reserved|bound|released")
            topologyScope = serializers.CharField(
                allow_null=True, help_text="nvlink|pcie|numa|node: the tightest scope reached"
            )
            gpus = PodGpuSerializer(many=True)
            attempts = serializers.IntegerField()
            lastReason = serializers.CharField(allow_blank=True)
            createdAt = serializers.DateTimeField()
            boundAt = serializers.DateTimeField(allow_null=True)
            startedAt = serializers.DateTimeField(allow_null=True)
            finishedAt = serializers.DateTimeField(allow_null=True)

        items = PodSerializer(many=True)

    @extend_schema(
        operation_id="workload_pods",
        summary="The workload's pods and where they are placed (node, GPU ids, topology scope), "
        "in the order they were created",
        parameters=[PositionPageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        params = query_of(PositionPageQuerySerializer, request)
        workload = selectors.workload_get(self.tenant(request), name)
        pods, next_cursor = keyset_page(
            workload.pods.order_by("id"), "id", params, descending=False
        )
        items = [_pod_doc(view) for view in selectors.workload_pods(workload, pods)]
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(WorkloadPodsApi.OutputSerializer(doc).data)


def _pod_doc(view: selectors.PodView) -> dict[str, Any]:
    pod = view.pod
    return {
        "name": pod.name,
        "podSet": pod.pod_set,
        "phase": pod.phase,
        "requests": resource_requests.write(pod_resources.resources_of(pod)),
        "node": view.node,
        "allocation": view.allocation_state,
        "topologyScope": view.scope,
        "gpus": [
            {
                "index": g.index,
                "uuid": g.uuid,
                "model": g.model,
                "milli": g.milli,
                "migSlot": g.mig_slot,
            }
            for g in view.gpus
        ],
        "attempts": pod.attempts,
        "lastReason": pod.last_reason,
        "createdAt": pod.created_at,
        "boundAt": pod.bound_at,
        "startedAt": pod.started_at,
        "finishedAt": pod.finished_at,
    }


class WorkloadPlacementsApi(TenantApi):
    class OutputSerializer(PageSerializer):
        class DecisionSerializer(serializers.Serializer):
            id = serializers.IntegerField()
            pod = serializers.CharField()
            node = serializers.CharField(allow_blank=True)
            outcome = serializers.CharField()
            summary = serializers.CharField(allow_blank=True)
            explanation = serializers.DictField(
                child=serializers.JSONField(),
                help_text="nodes, feasible, summary, the best candidates' per-plugin scores and, "
                "for the chosen node, every plugin's filter verdict and score",
            )
            createdAt = serializers.DateTimeField()

        items = DecisionSerializer(many=True)

    @extend_schema(
        operation_id="workload_placements",
        summary="The scheduler's decisions for the workload's pods, newest first",
        parameters=[IdPageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        params = query_of(IdPageQuerySerializer, request)
        workload = selectors.workload_get(self.tenant(request), name)
        decisions, next_cursor = keyset_page(
            selectors.workload_decisions(workload), "id", params, descending=True
        )
        items = [
            {
                "id": d.pk,
                "pod": d.pod.name,
                "node": d.node,
                "outcome": d.outcome,
                "summary": d.summary,
                "explanation": d.explanation,
                "createdAt": d.created_at,
            }
            for d in decisions
        ]
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(WorkloadPlacementsApi.OutputSerializer(doc).data)


class WorkloadPendingStatusApi(TenantApi):
    class OutputSerializer(serializers.Serializer):
        class ReasonSerializer(serializers.Serializer):
            reason = serializers.CharField()
            nodes = serializers.IntegerField()

        name = serializers.CharField()
        state = serializers.CharField()
        queueName = serializers.CharField()
        waiting = serializers.BooleanField()
        position = serializers.IntegerField(
            allow_null=True,
            help_text="1 = next: in its ClusterQueue while waiting for quota, among admitted "
            "workloads while waiting for nodes",
        )
        positionInClusterQueue = serializers.IntegerField(
            allow_null=True, help_text="Kueue's visibility API; null unless waiting for quota"
        )
        positionInLocalQueue = serializers.IntegerField(
            allow_null=True, help_text="Kueue's visibility API; null unless waiting for quota"
        )
        clusterQueue = serializers.CharField(
            allow_null=True, help_text="whose quota it holds, else its LocalQueue's"
        )
        localQueue = serializers.CharField(allow_blank=True, help_text="namespace/name")
        reason = serializers.CharField(
            allow_null=True,
            help_text="WaitingForQuota, Inadmissible, NoFit, TopologyPlacementFailed, "
            "WaitingForGang, Preempted, ...",
        )
        message = serializers.CharField(allow_blank=True)
        podsPending = serializers.IntegerField()
        attempts = serializers.IntegerField()
        lastAttemptAt = serializers.DateTimeField(allow_null=True)
        nodes = serializers.IntegerField(allow_null=True)
        feasibleNodes = serializers.IntegerField(allow_null=True)
        reasons = ReasonSerializer(many=True, help_text="nodes per filter reason, last attempt")
        lastDecision = serializers.DictField(child=serializers.JSONField(), allow_null=True)
        estimatedStart = serializers.DateTimeField(allow_null=True)
        estimatedStartBasis = serializers.CharField(
            allow_blank=True,
            help_text="what the run times the estimate rests on come from: 'learned: p50 of 37 "
            "similar jobs (...)' or a prior before any has finished ('prior: declared limit "
            "(...)', 'prior: queue default (...)'); when the start is unknown, why",
        )

    @extend_schema(
        operation_id="workload_pending_status",
        summary="Why the workload waits: position, reason, per-filter summary, start estimate",
        responses=documented(OutputSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        workload = selectors.workload_get(self.tenant(request), name)
        s = selectors.workload_pending_status(workload)
        doc = {
            "name": workload.name,
            "state": workload.state,
            "queueName": workload.queue_name,
            "waiting": s.waiting,
            "clusterQueue": s.cluster_queue,
            "localQueue": s.local_queue,
            "position": s.position,
            "positionInClusterQueue": s.position_in_cluster_queue,
            "positionInLocalQueue": s.position_in_local_queue,
            "reason": s.reason,
            "message": s.message,
            "podsPending": s.pods_pending,
            "attempts": s.attempts,
            "lastAttemptAt": s.last_attempt_at,
            "nodes": s.nodes,
            "feasibleNodes": s.feasible_nodes,
            "reasons": [{"reason": r.reason, "nodes": r.nodes} for r in s.reasons],
            "lastDecision": s.last_decision,
            "estimatedStart": s.estimate.p50 if s.estimate else None,
            "estimatedStartBasis": s.estimate.basis if s.estimate else "",
        }
        return Response(WorkloadPendingStatusApi.OutputSerializer(doc).data)
