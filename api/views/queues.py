"""Queues as tenants and admins see them: local queues, flavors, cluster queues and priority
classes."""

from __future__ import annotations

import math
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api import selectors
from api import services as api_services
from api.fields import StrictSerializer
from api.permissions import IsAdmin, IsTenant
from api.views.common import (
    AdminApi,
    NamePageQuerySerializer,
    PageSerializer,
    PositionPageQuerySerializer,
    QualifiedNamePageQuerySerializer,
    TenantApi,
    documented,
    list_page,
    query_of,
)
from scheduling.models import Tenant
from scheduling.selectors import cohorts as queue_selectors


class AdmissionFairSharingStatusSerializer(serializers.Serializer):
    """Kueue's LocalQueue status.fairSharing.admissionFairSharingStatus, and the order it gives."""

    consumedResources = serializers.DictField(
        child=serializers.CharField(), help_text="decayed usage per resource"
    )
    lastUpdate = serializers.DateTimeField(allow_null=True)
    weightedUsage = serializers.FloatField(
        help_text="sum of resourceWeights x consumed, divided by the LocalQueue's weight"
    )
    rank = serializers.IntegerField(
        help_text="1-based among its ClusterQueue's LocalQueues: lowest usage is admitted first"
    )
    weight = serializers.FloatField()


class LocalQueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    namespace = serializers.CharField()
    tenant = serializers.CharField()
    clusterQueue = serializers.CharField(
        allow_null=True, help_text="null: no such LocalQueue (its workloads are inadmissible)"
    )
    pendingWorkloads = serializers.IntegerField()
    admittedWorkloads = serializers.IntegerField(
        help_text="workloads holding quota, running or not (Kueue's admittedWorkloads)"
    )
    runningWorkloads = serializers.IntegerField(help_text="of the admitted, those running")
    admissionFairSharing = AdmissionFairSharingStatusSerializer(
        allow_null=True,
        help_text="null unless its ClusterQueue uses UsageBasedAdmissionFairSharing",
    )


def _queue_docs(tenant: Tenant | None) -> list[dict[str, Any]]:
    fair = queue_selectors.local_queue_fair_usage()
    return [
        {
            "name": lq.name,
            "namespace": lq.namespace,
            "tenant": lq.tenant,
            "clusterQueue": lq.cluster_queue,
            "pendingWorkloads": lq.pending,
            "admittedWorkloads": lq.admitted,
            "runningWorkloads": lq.running,
            "admissionFairSharing": _fair_usage_doc(fair.get(f"{lq.namespace}/{lq.name}")),
        }
        for lq in selectors.local_queues(tenant)
    ]


def _fair_usage_doc(usage: queue_selectors.LocalQueueFairUsage | None) -> Any:
    if usage is None:
        return None
    return {
        "consumedResources": usage.consumed,
        "lastUpdate": usage.sampled_at,
        "weightedUsage": usage.usage if math.isfinite(usage.usage) else None,
        "rank": usage.rank,
        "weight": usage.weight,
    }


class LocalQueueListApi(TenantApi):
    class OutputSerializer(PageSerializer):
        items = LocalQueueSerializer(many=True)

    @extend_schema(
        operation_id="queue_list",
        summary="The tenant's local queues and their workload counts, by name",
        parameters=[NamePageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(NamePageQuerySerializer, request)
        items, next_cursor = list_page(
            _queue_docs(self.tenant(request)), lambda d: str(d["name"]), params
        )
        return Response(
            LocalQueueListApi.OutputSerializer({"items": items, "nextCursor": next_cursor}).data
        )


class LocalQueuePendingWorkloadsApi(TenantApi):
    class OutputSerializer(PageSerializer):
        class PendingWorkloadSerializer(serializers.Serializer):
            name = serializers.CharField()
            localQueueName = serializers.CharField()
            clusterQueue = serializers.CharField()
            positionInClusterQueue = serializers.IntegerField(help_text="1 = admitted next")
            positionInLocalQueue = serializers.IntegerField(help_text="1 = first of this queue")
            reason = serializers.CharField(allow_blank=True)
            message = serializers.CharField(allow_blank=True)

        items = PendingWorkloadSerializer(many=True)

    @extend_schema(
        operation_id="queue_pending_workloads",
        summary="The workloads waiting for quota in one of the tenant's local queues, in the "
        "order they will be admitted (Kueue's visibility API)",
        parameters=[PositionPageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request, name: str) -> Response:
        params = query_of(PositionPageQuerySerializer, request)
        views, next_cursor = list_page(
            selectors.local_queue_pending(self.tenant(request), name),
            lambda v: int(v.position_in_local_queue),
            params,
        )
        items = [
            {
                "name": v.workload.name,
                "localQueueName": v.workload.queue_name,
                "clusterQueue": v.cluster_queue,
                "positionInClusterQueue": v.position_in_cluster_queue,
                "positionInLocalQueue": v.position_in_local_queue,
                "reason": v.reason,
                "message": v.message,
            }
            for v in views
        ]
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(LocalQueuePendingWorkloadsApi.OutputSerializer(doc).data)


class FlavorListApi(APIView):
    permission_classes = [IsTenant | IsAdmin]

    class OutputSerializer(PageSerializer):
        class FlavorSerializer(serializers.Serializer):
            name = serializers.CharField()
            gpuModel = serializers.CharField()
            nodeLabels = serializers.DictField(child=serializers.CharField())
            nodes = serializers.IntegerField()
            cordonedNodes = serializers.IntegerField()
            gpus = serializers.IntegerField()
            gpusFree = serializers.IntegerField(help_text="whole GPUs free on schedulable nodes")
            largestFreeBlock = serializers.IntegerField(
                help_text="most free whole GPUs on one schedulable node"
            )
            sharedMilliFree = serializers.IntegerField(
                help_text="spare milli-GPUs on shared (time-slicing/MPS) GPUs"
            )
            migGpus = serializers.IntegerField()

        nodes = serializers.IntegerField()
        schedulableNodes = serializers.IntegerField()
        cpuFree = serializers.CharField()
        memoryFree = serializers.CharField()
        items = FlavorSerializer(
            many=True, help_text="ResourceFlavors (else one per GPU model), by name, paged"
        )
        gpuModels = FlavorSerializer(
            many=True, help_text="the same capacity per GPU model (one each: not paged)"
        )

    @extend_schema(
        operation_id="flavor_list",
        summary="GPU flavors (by model) and their free capacity",
        parameters=[NamePageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(NamePageQuerySerializer, request)
        cap = selectors.capacity()
        flavors, next_cursor = list_page(cap.flavors, lambda f: str(f.name), params)
        doc = {
            "nodes": cap.nodes,
            "schedulableNodes": cap.schedulable_nodes,
            "cpuFree": selectors.format_amount("cpu", cap.cpu_milli_free),
            "memoryFree": selectors.format_amount("memory", cap.memory_mib_free),
            "items": [_flavor_doc(f) for f in flavors],
            "nextCursor": next_cursor,
            "gpuModels": [_flavor_doc(f) for f in cap.gpu_models],
        }
        return Response(FlavorListApi.OutputSerializer(doc).data)


def _flavor_doc(f: selectors.FlavorView) -> dict[str, Any]:
    return {
        "name": f.name,
        "gpuModel": f.gpu_model,
        "nodeLabels": f.node_labels,
        "nodes": f.nodes,
        "cordonedNodes": f.cordoned_nodes,
        "gpus": f.gpus,
        "gpusFree": f.gpus_free,
        "largestFreeBlock": f.largest_free_block,
        "sharedMilliFree": f.shared_milli_free,
        "migGpus": f.mig_gpus,
    }


class AdminLocalQueueListApi(AdminApi):
    class OutputSerializer(PageSerializer):
        items = LocalQueueSerializer(many=True)

    @extend_schema(
        operation_id="admin_local_queue_list",
        summary="Every tenant's local queues and their workload counts, by namespace/name",
        parameters=[QualifiedNamePageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(QualifiedNamePageQuerySerializer, request)
        items, next_cursor = list_page(
            _queue_docs(None), lambda d: f"{d['namespace']}/{d['name']}", params
        )
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(AdminLocalQueueListApi.OutputSerializer(doc).data)


class ClusterQueueListApi(AdminApi):
    class OutputSerializer(PageSerializer):
        class ClusterQueueSerializer(serializers.Serializer):
            class FlavorUsageSerializer(serializers.Serializer):
                class ResourceUsageSerializer(serializers.Serializer):
                    name = serializers.CharField()
                    nominalQuota = serializers.CharField()
                    borrowingLimit = serializers.CharField(allow_null=True)
                    lendingLimit = serializers.CharField(allow_null=True)
                    total = serializers.CharField(help_text="in use")
                    borrowed = serializers.CharField()
                    available = serializers.CharField(
                        help_text="still admissible, borrowing included"
                    )

                name = serializers.CharField()
                resources = ResourceUsageSerializer(many=True)

            name = serializers.CharField()
            cohortName = serializers.CharField(allow_blank=True)
            queueingStrategy = serializers.CharField()
            preemption = serializers.DictField(child=serializers.JSONField())
            fairSharingWeight = serializers.FloatField()
            localQueues = serializers.ListField(child=serializers.CharField())
            pendingWorkloads = serializers.IntegerField()
            admittedWorkloads = serializers.IntegerField()
            weightedShare = serializers.IntegerField(help_text="Kueue's dominant resource share")
            dominantResource = serializers.CharField(allow_blank=True)
            admissionMode = serializers.CharField(
                help_text="admissionScope.admissionMode (UsageBasedAdmissionFairSharing orders "
                "by LocalQueue usage)"
            )
            stopPolicy = serializers.CharField()
            consolidation = serializers.ChoiceField(
                choices=["Allowed", "Never"],
                help_text="the annotation gpusched.io/consolidation: Never keeps the queue out of "
                "consolidation (its running work is never moved to make room for a gang whose "
                "reservation cannot complete, and its gangs never move others' work)",
            )
            deletedFromClusterAt = serializers.DateTimeField(
                allow_null=True,
                help_text="when the Kubernetes cluster it is mirrored from deleted it while it "
                "held admitted workloads: terminating, kept on Hold until they are gone (null: "
                "not deleted)",
            )
            cohortPath = serializers.ListField(
                child=serializers.CharField(), help_text="its cohort, then each ancestor"
            )
            flavorsUsage = FlavorUsageSerializer(
                many=True,
                help_text="every covered resource: cpu, memory, GPUs, MIG, pods and extended "
                "resources, in Kubernetes quantities",
            )

        class SourceSerializer(serializers.Serializer):
            kind = serializers.ChoiceField(
                choices=["database", "cluster", "kueue"],
                help_text="database: applyqueues and this API; cluster: Kueue's objects in the "
                "Kubernetes cluster, mirrored whole; kueue: Kueue admits and gpusched only places",
            )
            appliedAt = serializers.DateTimeField(
                allow_null=True, help_text="the cluster's objects, last applied"
            )
            error = serializers.CharField(
                allow_blank=True,
                help_text="why the cluster's objects are refused now (the last good queues stay)",
            )
            errorSince = serializers.DateTimeField(allow_null=True)
            notes = serializers.ListField(
                child=serializers.CharField(),
                help_text="what the last apply left out or kept back",
            )

        items = ClusterQueueSerializer(many=True)
        queueSource = SourceSerializer(help_text="where the queues come from")

    @extend_schema(
        operation_id="admin_cluster_queue_list",
        summary="Cluster queues: quotas, cohort, preemption, usage, borrowing and fair share",
        parameters=[NamePageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(NamePageQuerySerializer, request)
        rows, next_cursor = list_page(selectors.cluster_queues(), lambda r: str(r[0].name), params)
        items = [_cluster_queue_doc(*row) for row in rows]
        source = queue_selectors.queue_source()
        doc = {
            "items": items,
            "nextCursor": next_cursor,
            "queueSource": {
                "kind": source.kind,
                "appliedAt": source.applied_at,
                "error": source.error,
                "errorSince": source.error_since,
                "notes": source.notes,
            },
        }
        return Response(ClusterQueueListApi.OutputSerializer(doc).data)


def _cluster_queue_doc(cq: Any, status: Any, local_queues: list[str]) -> dict[str, Any]:
    usage = status.flavors_usage if status is not None else []
    return {
        "name": cq.name,
        "cohortName": cq.cohort,
        "queueingStrategy": cq.queueing_strategy,
        "preemption": {
            "withinClusterQueue": cq.within_cluster_queue,
            "reclaimWithinCohort": cq.reclaim_within_cohort,
            "borrowWithinCohort": {
                "policy": cq.borrow_within_cohort,
                "maxPriorityThreshold": cq.borrow_max_priority_threshold,
            },
        },
        "fairSharingWeight": cq.fair_sharing_weight,
        "localQueues": local_queues,
        "pendingWorkloads": status.pending_workloads if status is not None else 0,
        "admittedWorkloads": status.admitted_workloads if status is not None else 0,
        "weightedShare": status.weighted_share if status is not None else 0,
        "dominantResource": status.dominant_resource if status is not None else "",
        "admissionMode": cq.admission_mode,
        "stopPolicy": cq.stop_policy,
        "consolidation": cq.consolidation,
        "deletedFromClusterAt": cq.deleted_from_source_at,
        "cohortPath": list(status.cohort_path) if status is not None else [],
        "flavorsUsage": [
            {
                "name": flavor,
                "resources": [
                    {
                        "name": r.name,
                        "nominalQuota": r.nominal_quota,
                        "borrowingLimit": r.borrowing_limit,
                        "lendingLimit": r.lending_limit,
                        "total": r.total,
                        "borrowed": r.borrowed,
                        "available": r.available,
                    }
                    for r in resources
                ],
            }
            for flavor, resources in usage
        ],
    }


class ClusterQueueConsolidationApi(AdminApi):
    class InputSerializer(StrictSerializer):
        consolidation = serializers.ChoiceField(
            choices=["Allowed", "Never"],
            help_text="Never: the queue's running work is never moved to make room for a gang, "
            "and its gangs never move others' work (the annotation gpusched.io/consolidation)",
        )

    class OutputSerializer(serializers.Serializer):
        clusterQueue = serializers.CharField()
        consolidation = serializers.DictField(
            child=serializers.CharField(), help_text="{from, to}; empty when nothing changed"
        )

    @extend_schema(
        operation_id="admin_cluster_queue_consolidation_update",
        summary="Turn consolidation on or off for a ClusterQueue, audited",
        request=InputSerializer,
        responses=documented(OutputSerializer, 400, 403, 409, 413, 422),
    )
    def put(self, request: Request, name: str) -> Response:
        serializer = ClusterQueueConsolidationApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        changed = api_services.cluster_queue_consolidation_set(
            name=name,
            policy=serializer.validated_data["consolidation"],
            actor=request.user.get_username(),
        )
        return Response(ClusterQueueConsolidationApi.OutputSerializer(changed).data)


class CohortListApi(AdminApi):
    class OutputSerializer(PageSerializer):
        class CohortSerializer(serializers.Serializer):
            class ResourceSerializer(serializers.Serializer):
                flavor = serializers.CharField()
                name = serializers.CharField()
                nominalQuota = serializers.CharField(help_text="the cohort's own quota")
                subtreeQuota = serializers.CharField(
                    help_text="its own plus what its members and child cohorts lend up"
                )
                usage = serializers.CharField(help_text="what the subtree uses of it")

            name = serializers.CharField()
            parentName = serializers.CharField(allow_blank=True)
            fairSharingWeight = serializers.FloatField()
            defined = serializers.BooleanField(
                help_text="false: only named by ClusterQueues or child cohorts"
            )
            clusterQueues = serializers.ListField(child=serializers.CharField())
            weightedShare = serializers.IntegerField(help_text="at its parent's level")
            resources = ResourceSerializer(many=True)

        items = CohortSerializer(many=True)

    @extend_schema(
        operation_id="admin_cohort_list",
        summary="Cohorts (Kueue's hierarchical cohorts): tree, quotas and use, by name",
        parameters=[NamePageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(NamePageQuerySerializer, request)
        cohorts, next_cursor = list_page(
            queue_selectors.cohort_status(), lambda c: str(c.name), params
        )
        items = [
            {
                "name": c.name,
                "parentName": c.parent,
                "fairSharingWeight": c.weight,
                "defined": c.defined,
                "clusterQueues": c.cluster_queues,
                "weightedShare": c.weighted_share,
                "resources": [
                    {
                        "flavor": r.flavor,
                        "name": r.name,
                        "nominalQuota": r.nominal_quota,
                        "subtreeQuota": r.subtree_quota,
                        "usage": r.usage,
                    }
                    for r in c.resources
                ],
            }
            for c in cohorts
        ]
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(CohortListApi.OutputSerializer(doc).data)


class PriorityClassListApi(APIView):
    permission_classes = [IsTenant | IsAdmin]

    class OutputSerializer(PageSerializer):
        class PriorityClassSerializer(serializers.Serializer):
            name = serializers.CharField()
            kind = serializers.ChoiceField(choices=["WorkloadPriorityClass", "PriorityClass"])
            value = serializers.IntegerField()
            preemptionPolicy = serializers.CharField()
            globalDefault = serializers.BooleanField()
            description = serializers.CharField(allow_blank=True)

        items = PriorityClassSerializer(many=True)

    @extend_schema(
        operation_id="priority_class_list",
        summary="Priority classes a workload may name (priorityClassName), by name",
        parameters=[NamePageQuerySerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = query_of(NamePageQuerySerializer, request)
        classes, next_cursor = list_page(
            selectors.priority_classes(), lambda pc: str(pc.name), params
        )
        items = [
            {
                "name": pc.name,
                "kind": pc.kind,
                "value": pc.value,
                "preemptionPolicy": pc.preemption_policy,
                "globalDefault": pc.global_default,
                "description": pc.description,
            }
            for pc in classes
        ]
        doc = {"items": items, "nextCursor": next_cursor}
        return Response(PriorityClassListApi.OutputSerializer(doc).data)
