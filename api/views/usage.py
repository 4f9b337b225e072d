"""A tenant's quota and what it uses (telemetry joined with allocations)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api import selectors
from api.fields import QuerySerializer
from api.views.common import (
    LimitsSerializer,
    TenantApi,
    documented,
    query_of,
)
from scheduling.models import Tenant

# --- quota, usage, queues, flavors ---------------------------------------------------------------


class TenantQuotaApi(TenantApi):
    class OutputSerializer(serializers.Serializer):
        class ClusterQueueQuotaSerializer(serializers.Serializer):
            class FlavorSerializer(serializers.Serializer):
                class ResourceSerializer(serializers.Serializer):
                    name = serializers.CharField()
                    nominalQuota = serializers.CharField()
                    borrowingLimit = serializers.CharField(allow_null=True)
                    used = serializers.CharField(help_text="by this tenant's admitted workloads")
                    total = serializers.CharField(
                        help_text="by every admitted workload of the ClusterQueue"
                    )
                    available = serializers.CharField(
                        help_text="what the ClusterQueue could still admit, borrowing included"
                    )

                name = serializers.CharField()
                resources = ResourceSerializer(many=True)

            name = serializers.CharField()
            cohort = serializers.CharField(allow_blank=True)
            flavors = FlavorSerializer(many=True)

        tenant = serializers.CharField()
        namespace = serializers.CharField()
        queueNames = serializers.ListField(child=serializers.CharField())
        clusterQueues = ClusterQueueQuotaSerializer(
            many=True, help_text="the ClusterQueues its LocalQueues point at"
        )
        hard = serializers.DictField(
            child=serializers.CharField(),
            help_text="nominal quota per resource, summed over its ClusterQueues' flavors",
        )
        used = serializers.DictField(
            child=serializers.CharField(),
            help_text="what its admitted workloads hold of it (pending ones hold nothing)",
        )
        limits = LimitsSerializer()

    @extend_schema(
        operation_id="quota_retrieve",
        summary="The tenant's quota (its ClusterQueues' nominal quota), what its admitted "
        "workloads hold, and its per-pod limits",
        responses=documented(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        doc = quota_doc(self.tenant(request))
        return Response(TenantQuotaApi.OutputSerializer(doc).data)


def quota_doc(tenant: Tenant) -> dict[str, Any]:
    """The tenant's quota as TenantQuotaApi shows it (also the answer to an admin's change)."""
    view = selectors.tenant_quota(tenant)
    return {
        "tenant": tenant.name,
        "namespace": tenant.namespace,
        "queueNames": view.queue_names,
        "clusterQueues": [
            {
                "name": cq.name,
                "cohort": cq.cohort,
                "flavors": [
                    {
                        "name": flavor,
                        "resources": [
                            {
                                "name": r.name,
                                "nominalQuota": r.nominal_quota,
                                "borrowingLimit": r.borrowing_limit,
                                "used": r.used,
                                "total": r.total,
                                "available": r.available,
                            }
                            for r in resources
                        ],
                    }
                    for flavor, resources in cq.flavors
                ],
            }
            for cq in view.cluster_queues
        ],
        "hard": view.hard,
        "used": view.used,
        "limits": view.limits,
    }


MAX_USAGE_WINDOW = timedelta(days=7)
# 1s to 7d (MAX_USAGE_WINDOW) in one unit, written out so that the schema says exactly what the
# server accepts: seconds 1-604800, minutes 1-10080, hours 1-168, days 1-7.
WINDOW_PATTERN = (
    r"^(([1-9][0-9]{0,4}|[1-5][0-9]{5}|60[0-3][0-9]{3}|604[0-7][0-9]{2}|604800)s"
    r"|([1-9][0-9]{0,3}|100[0-7][0-9]|10080)m"
    r"|([1-9][0-9]?|1[0-5][0-9]|16[0-8])h"
    r"|[1-7]d)$"
)
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(text: str) -> timedelta:
    """`30m` -> 30 minutes; the text has passed WINDOW_PATTERN."""
    return timedelta(seconds=int(text[:-1]) * _UNITS[text[-1]])


class TenantUsageApi(TenantApi):
    class FilterSerializer(QuerySerializer):
        window = serializers.RegexField(
            WINDOW_PATTERN,
            required=False,
            default="1h",
            help_text="1s to 7d in one unit: 30m, 1h, 7d",
            error_messages={"invalid": "a duration from 1s to 7d such as 30m, 1h or 7d"},
        )

        def validate_window(self, value: str) -> timedelta:
            return parse_window(value)

    class OutputSerializer(serializers.Serializer):
        class AdviceSerializer(serializers.Serializer):
            workload = serializers.CharField()
            pods = serializers.IntegerField()
            requestedGpus = serializers.FloatField(help_text="per pod")
            usedP95Gpus = serializers.FloatField(help_text="per pod, DCGM-measured")
            recommended = serializers.DictField(
                child=serializers.CharField(), help_text="what each pod should request"
            )
            savingGpus = serializers.FloatField(help_text="per pod")

        class PointSerializer(serializers.Serializer):
            minute = serializers.DateTimeField()
            requestedGpus = serializers.FloatField(allow_null=True)
            usedAvgGpus = serializers.FloatField()
            usedMaxGpus = serializers.FloatField()
            heldGpus = serializers.FloatField()
            fbUsedMiB = serializers.FloatField()

        tenant = serializers.CharField()
        namespace = serializers.CharField()
        windowSeconds = serializers.IntegerField()
        requestedGpus = serializers.FloatField(help_text="time-weighted average over the window")
        usedP95Gpus = serializers.FloatField(allow_null=True, help_text="null: no telemetry")
        overRequest = serializers.FloatField(allow_null=True, help_text="requested / p95(used)")
        usageRatio = serializers.FloatField()
        advice = AdviceSerializer(many=True)
        series = PointSerializer(many=True)

    @extend_schema(
        operation_id="usage_retrieve",
        summary="Requested vs DCGM-measured GPUs, overRequest index, right-sizing advice",
        parameters=[FilterSerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        tenant = self.tenant(request)
        window = query_of(TenantUsageApi.FilterSerializer, request)["window"]
        view = selectors.tenant_usage(tenant, window)
        doc = {
            "tenant": tenant.name,
            "namespace": tenant.namespace,
            "windowSeconds": int(window.total_seconds()),
            "requestedGpus": view.requested_gpus,
            "usedP95Gpus": view.used_p95_gpus,
            "overRequest": view.over_request,
            "usageRatio": view.usage_ratio,
            "advice": [
                {
                    "workload": a.workload,
                    "pods": a.pods,
                    "requestedGpus": a.advice.requested_gpus,
                    "usedP95Gpus": a.advice.used_p95_gpus,
                    "recommended": dict([a.advice.resource.split(": ", 1)]),
                    "savingGpus": a.advice.saving_gpus,
                }
                for a in view.advice
            ],
            "series": [
                {
                    "minute": p.minute,
                    "requestedGpus": p.requested,
                    "usedAvgGpus": p.used_avg,
                    "usedMaxGpus": p.used_max,
                    "heldGpus": p.gpus,
                    "fbUsedMiB": p.fb_used_mib,
                }
                for p in view.series
            ],
        }
        return Response(TenantUsageApi.OutputSerializer(doc).data)
