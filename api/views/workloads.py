"""A tenant's workloads: submit, list, read, deactivate and cancel (POST .../cancel or DELETE)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from api import selectors
from api import services as api_services
from api.exceptions import InvalidInput
from api.fields import (
    StrictSerializer,
    dns_label,
)
from api.throttling import PrincipalRateThrottle, SubmitRateThrottle
from api.views.common import (
    IdPageQuerySerializer,
    PageSerializer,
    TenantApi,
    documented,
    keyset_page,
    query_of,
)
from api.views.workload_docs import (
    PodSetSerializer,
    PriorityClassRefSerializer,
    WorkloadSerializer,
    workload_doc,
)
from scheduling.core.types import ServiceClass
from scheduling.models import Workload

MAX_IDEMPOTENCY_KEY = 255
_STATE = "|".join(Workload.State.values)
STATES_PATTERN = rf"^ *({_STATE}) *(, *({_STATE}) *)*$"


def _workload_response(w: Workload, code: int = status.HTTP_200_OK) -> Response:
    pods = selectors.pod_phase_counts([w.pk]).get(w.pk, {})
    assignments = selectors.pod_set_assignments([w]).get(w.pk, [])
    doc = workload_doc(w, w.tenant.namespace, pods, assignments)
    return Response(WorkloadSerializer(doc).data, status=code)


# --- workloads ----------------------------------------------------------------------------------


class WorkloadCreateApi(TenantApi):
    class InputSerializer(StrictSerializer):
        name = dns_label()
        queueName = dns_label(required=False)
        priority = serializers.IntegerField(
            min_value=-(10**9),
            max_value=10**9,
            required=False,
            allow_null=True,
            default=None,
            help_text="default: the priority class's value",
        )
        priorityClassName = dns_label(
            required=False,
            default="",
            help_text="a WorkloadPriorityClass, else a PriorityClass, of that name",
        )
        priorityClassRef = PriorityClassRefSerializer(required=False, allow_null=True, default=None)
        active = serializers.BooleanField(default=True)
        serviceClass = serializers.ChoiceField(
            choices=[c.value for c in ServiceClass], default=ServiceClass.BATCH.value
        )
        podSets = serializers.ListField(child=PodSetSerializer(), min_length=1, max_length=8)
        maximumExecutionTimeSeconds = serializers.IntegerField(
            min_value=1, max_value=10**8, required=False, allow_null=True, default=None
        )

        def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
            # Across fields, which the schema cannot say: a 422 (api/exceptions.py).
            ref = attrs.get("priorityClassRef")
            if ref and attrs.get("priorityClassName") not in ("", ref["name"]):
                raise InvalidInput.one(
                    "priorityClassName", "give priorityClassName or priorityClassRef, not both"
                )
            return attrs

    @extend_schema(
        operation_id="workload_create",
        summary="Submit a workload",
        description=(
            "Idempotent with an `Idempotency-Key` header: repeating the same body with the same "
            "key returns the workload made the first time (200) instead of a 409. A submit "
            "that would leave more pods or workloads pending than the tenant's or the queue's "
            "limit is refused 403 `exceeded quota`, naming the limit and the count."
        ),
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                {"type": "string", "maxLength": MAX_IDEMPOTENCY_KEY},
                OpenApiParameter.HEADER,
                required=False,
            )
        ],
        responses=documented(
            {201: WorkloadSerializer, 200: WorkloadSerializer}, 400, 403, 409, 413, 422
        ),
    )
    def post(self, request: Request) -> Response:
        tenant = self.tenant(request)
        serializer = WorkloadCreateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        raw_key = request.headers.get("Idempotency-Key", "")
        key = raw_key.strip() or None
        if len(raw_key) > MAX_IDEMPOTENCY_KEY:
            raise serializers.ValidationError(
                {"Idempotency-Key": [f"at most {MAX_IDEMPOTENCY_KEY} characters"]}
            )
        ref = data["priorityClassRef"]
        workload, created = api_services.workload_create(
            tenant=tenant,
            name=data["name"],
            pod_sets=data["podSets"],
            queue_name=data.get("queueName"),
            priority=data["priority"],
            priority_class_name=ref["name"] if ref else data["priorityClassName"],
            priority_class_kind=ref["kind"] if ref else "",
            active=data["active"],
            service_class=data["serviceClass"],
            maximum_execution_time_s=data["maximumExecutionTimeSeconds"],
            idempotency_key=key,
            fingerprint=api_services.request_fingerprint(request.data),
        )
        return _workload_response(workload, status.HTTP_201_CREATED if created else 200)


class WorkloadListApi(TenantApi):
    class FilterSerializer(IdPageQuerySerializer):
        state = serializers.RegexField(
            STATES_PATTERN,
            required=False,
            help_text="comma-separated states",
            error_messages={"invalid": f"comma-separated states ({_STATE.replace('|', ', ')})"},
        )
        queueName = serializers.CharField(required=False, max_length=63)
        priorityClassName = serializers.CharField(required=False, max_length=63)
        serviceClass = serializers.ChoiceField(
            choices=[c.value for c in ServiceClass], required=False
        )
        namePrefix = serializers.CharField(required=False, max_length=63)
        createdAfter = serializers.DateTimeField(required=False)
        createdBefore = serializers.DateTimeField(required=False)

        def validate_state(self, value: str) -> list[str]:
            return [s.strip() for s in value.split(",")]

    class OutputSerializer(PageSerializer):
        items = WorkloadSerializer(many=True)

    @extend_schema(
        operation_id="workload_list",
        summary="List the tenant's workloads, newest first",
        parameters=[FilterSerializer],
        responses=documented(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        tenant = self.tenant(request)
        params = query_of(WorkloadListApi.FilterSerializer, request)
        filters = selectors.WorkloadFilters(
            states=params.get("state") or (),
            queue_name=params.get("queueName"),
            priority_class_name=params.get("priorityClassName"),
            service_class=params.get("serviceClass"),
            name_prefix=params.get("namePrefix"),
            created_after=params.get("createdAfter"),
            created_before=params.get("createdBefore"),
        )
        rows, next_cursor = keyset_page(
            selectors.workloads_of(tenant, filters), "id", params, descending=True
        )
        counts = selectors.pod_phase_counts(w.pk for w in rows)
        assignments = selectors.pod_set_assignments(rows)
        now = timezone.now()
        items = [
            workload_doc(w, tenant.namespace, counts.get(w.pk, {}), assignments.get(w.pk, []), now)
            for w in rows
        ]
        # The documents already have OutputSerializer's shape (the schema tests hold them to it);
        # running a page of them through DRF's fields took half of each request, so they go out
        # as they are (the JSON renderer writes datetimes and UUIDs the same way).
        return Response({"items": items, "nextCursor": next_cursor})


class WorkloadsApi(WorkloadListApi, WorkloadCreateApi):
    """Routing only: GET lists (WorkloadListApi), POST submits (WorkloadCreateApi)."""

    def get_throttles(self) -> list[BaseThrottle]:
        if self.request.method == "POST":
            return [PrincipalRateThrottle(), SubmitRateThrottle()]
        return [PrincipalRateThrottle()]


class WorkloadDetailApi(TenantApi):
    @extend_schema(
        operation_id="workload_retrieve",
        summary="One workload",
        responses=documented(WorkloadSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        return _workload_response(selectors.workload_get(self.tenant(request), name))

    class PatchSerializer(StrictSerializer):
        active = serializers.BooleanField(
            help_text="false: evict and hold the workload (Kueue's deactivation); true: queue it "
            "again"
        )

    @extend_schema(
        operation_id="workload_update",
        summary="Deactivate or reactivate a workload (Kueue's spec.active)",
        request=PatchSerializer,
        responses=documented(WorkloadSerializer, 400, 403, 404, 409),
    )
    def patch(self, request: Request, name: str) -> Response:
        workload = selectors.workload_get(self.tenant(request), name)
        serializer = WorkloadDetailApi.PatchSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        active = serializer.validated_data["active"]
        return _workload_response(
            api_services.workload_set_active(workload=workload, active=active)
        )

    @extend_schema(
        operation_id="workload_delete",
        summary="Cancel a workload (as POST .../cancel): the workload stays, Cancelled",
        request=None,
        responses=documented(WorkloadSerializer, 403, 404, 409),
    )
    def delete(self, request: Request, name: str) -> Response:
        workload = selectors.workload_get(self.tenant(request), name)
        return _workload_response(api_services.workload_cancel(workload=workload))


class WorkloadCancelApi(TenantApi):
    @extend_schema(
        operation_id="workload_cancel",
        summary="Cancel a workload: its pods stop and release what they hold",
        request=None,
        responses=documented(WorkloadSerializer, 403, 404, 409),
    )
    def post(self, request: Request, name: str) -> Response:
        workload = selectors.workload_get(self.tenant(request), name)
        return _workload_response(api_services.workload_cancel(workload=workload))
