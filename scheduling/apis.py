"""The REST API under /api/v1/ (HackSoft style): one APIView per operation, `<Entity><Action>Api`,
with nested Input/Output serializers; services and selectors do the work. Names follow Kueue
(camelCase fields, Kubernetes resource names and quantities; shared/reference/wire-formats.md §6).

Tenants (bearer token) see and touch only their own workloads: another tenant's workload is a 404,
exactly like a missing one. Admins (staff session or token) manage tenants, queues and nodes.
Errors are {"message", "extra"} (api/exceptions.py); invalid input is a 400 naming each field.

Where two operations share a path (list and create), a small routing class combines the two
operation classes; the operations stay separate.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from api import selectors
from api import services as api_services
from api.exceptions import InvalidInput, NotFound
from api.models import ApiToken
from api.permissions import IsAdmin, IsTenant, tenant_of
from api.throttling import PrincipalRateThrottle, SubmitRateThrottle
from scheduling.core.types import ServiceClass, TaintEffect, TopologyPolicy, TopologyScope
from scheduling.models import Gpu, Node, Pod, Tenant, Workload

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


def _responses(ok: Any, *errors: int) -> dict[int, Any]:
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


def _page(
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


def _query(serializer_class: type[serializers.Serializer], request: Request) -> dict[str, Any]:
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


# --- workload documents -------------------------------------------------------------------------


class TolerationSerializer(StrictSerializer):
    key = serializers.CharField(max_length=253, allow_blank=True, required=False, default="")
    operator = serializers.ChoiceField(choices=["Equal", "Exists"], default="Equal")
    value = serializers.CharField(max_length=253, allow_blank=True, required=False, default="")
    effect = serializers.ChoiceField(
        choices=["", *(e.value for e in TaintEffect)], required=False, default=""
    )


class ResourcesSerializer(StrictSerializer):
    requests = quantity_map(required=False, default=dict)


class TopologySerializer(StrictSerializer):
    policy = serializers.ChoiceField(
        choices=[p.value for p in TopologyPolicy], default=TopologyPolicy.NONE.value
    )
    scope = serializers.ChoiceField(choices=[s.value for s in TopologyScope], required=False)


class PodTemplateSerializer(StrictSerializer):
    resources = ResourcesSerializer(required=False)
    gpuModels = serializers.ListField(
        child=serializers.CharField(max_length=128), required=False, max_length=16
    )
    topology = TopologySerializer(required=False)
    nodeSelector = serializers.DictField(
        child=serializers.CharField(max_length=253, allow_blank=True), required=False
    )
    tolerations = serializers.ListField(child=TolerationSerializer(), required=False, max_length=32)


class PodSetSerializer(StrictSerializer):
    name = dns_label()
    count = serializers.IntegerField(min_value=1, max_value=1000)
    minCount = serializers.IntegerField(
        min_value=1, max_value=1000, required=False, allow_null=True
    )
    template = PodTemplateSerializer()


class PodCountsSerializer(serializers.Serializer):
    total = serializers.IntegerField()
    pending = serializers.IntegerField()
    bound = serializers.IntegerField()
    running = serializers.IntegerField()
    succeeded = serializers.IntegerField()
    failed = serializers.IntegerField()
    cancelled = serializers.IntegerField()


class AdmissionSerializer(serializers.Serializer):
    clusterQueue = serializers.CharField()
    flavors = serializers.DictField(child=serializers.CharField(), help_text="resource -> flavor")


class WorkloadStatusSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=Workload.State.values)
    pendingReason = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(allow_blank=True)
    admission = AdmissionSerializer(allow_null=True)
    admittedAt = serializers.DateTimeField(allow_null=True)
    finishedAt = serializers.DateTimeField(allow_null=True)
    pods = PodCountsSerializer()
    conditions = ConditionSerializer(many=True)


class WorkloadPodSetSerializer(serializers.Serializer):
    """A pod set as stored: what the API accepted, defaults filled in (workloads submitted by
    other means may lack the template)."""

    name = serializers.CharField()
    count = serializers.IntegerField()
    minCount = serializers.IntegerField(allow_null=True, required=False)
    template = serializers.DictField(child=serializers.JSONField(), required=False)


class WorkloadSerializer(serializers.Serializer):
    uid = serializers.UUIDField()
    name = serializers.CharField()
    namespace = serializers.CharField()
    queueName = serializers.CharField()
    priority = serializers.IntegerField()
    priorityClassName = serializers.CharField(allow_blank=True)
    serviceClass = serializers.CharField()
    podSets = WorkloadPodSetSerializer(many=True)
    maximumExecutionTimeSeconds = serializers.IntegerField(allow_null=True)
    createdAt = serializers.DateTimeField()
    status = WorkloadStatusSerializer()


def _condition(
    kind: str, ok: bool, reason: str, message: str, at: datetime | None
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if ok else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": at,
    }


def _conditions(w: Workload, pods: Mapping[str, int]) -> list[dict[str, Any]]:
    """Kueue's Workload conditions, derived from the state the scheduler keeps."""
    if w.state == Workload.State.PENDING:
        waiting = w.reason or "waiting for quota reservation"
        return [_condition("QuotaReserved", False, "Pending", waiting, w.created_at)]
    admitted_at = w.admitted_at or w.created_at
    out = [
        _condition("QuotaReserved", True, "QuotaReserved", "quota reserved", admitted_at),
        _condition("Admitted", True, "Admitted", "admitted", admitted_at),
    ]
    active = sum(pods.get(p, 0) for p in Pod.ACTIVE_PHASES)
    running = pods.get(Pod.Phase.RUNNING, 0)
    if w.state in (Workload.State.ADMITTED, Workload.State.RUNNING):
        ready = active > 0 and running == active
        out.append(
            _condition(
                "PodsReady",
                ready,
                "PodsReady" if ready else "PodsNotReady",
                f"{running}/{active} pods running",
                None,
            )
        )
    else:
        reason = {
            Workload.State.FINISHED: "Succeeded",
            Workload.State.FAILED: "Failed",
            Workload.State.CANCELLED: "Cancelled",
        }[Workload.State(w.state)]
        out.append(_condition("Finished", True, reason, w.reason or reason.lower(), w.finished_at))
    return out


def workload_doc(w: Workload, namespace: str, pods: Mapping[str, int]) -> dict[str, Any]:
    counts = {phase.value.lower(): pods.get(phase.value, 0) for phase in Pod.Phase}
    return {
        "uid": w.uid,
        "name": w.name,
        "namespace": namespace,
        "queueName": w.queue_name,
        "priority": w.priority,
        "priorityClassName": w.priority_class_name,
        "serviceClass": w.service_class,
        "podSets": w.pod_sets,
        "createdAt": w.created_at,
        "maximumExecutionTimeSeconds": w.maximum_execution_time_s,
        "status": {
            "state": w.state,
            "pendingReason": w.pending_reason,
            "reason": w.reason,
            "admission": {"clusterQueue": w.cluster_queue.name, "flavors": w.flavors}
            if w.cluster_queue is not None
            else None,
            "admittedAt": w.admitted_at,
            "finishedAt": w.finished_at,
            "pods": {"total": sum(pods.values()), **counts},
            "conditions": _conditions(w, pods),
        },
    }


def _workload_response(w: Workload, code: int = status.HTTP_200_OK) -> Response:
    pods = selectors.pod_phase_counts([w.pk]).get(w.pk, {})
    doc = workload_doc(w, w.tenant.namespace, pods)
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
        priorityClassName = dns_label(required=False, default="")
        serviceClass = serializers.ChoiceField(
            choices=[c.value for c in ServiceClass], default=ServiceClass.BATCH.value
        )
        podSets = serializers.ListField(child=PodSetSerializer(), min_length=1, max_length=8)
        maximumExecutionTimeSeconds = serializers.IntegerField(
            min_value=1, max_value=10**8, required=False, allow_null=True, default=None
        )

        def validate_podSets(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
            total = sum(pod_set["count"] for pod_set in value)
            if total > MAX_PODS_PER_WORKLOAD:
                raise serializers.ValidationError(
                    f"{total} pods in one workload; at most {MAX_PODS_PER_WORKLOAD}"
                )
            return value

    @extend_schema(
        operation_id="workload_create",
        summary="Submit a workload",
        description=(
            "Idempotent with an `Idempotency-Key` header: repeating the same body with the same "
            "key returns the workload made the first time (200) instead of a 409."
        ),
        request=InputSerializer,
        parameters=[
            OpenApiParameter(
                "Idempotency-Key", OpenApiTypes.STR, OpenApiParameter.HEADER, required=False
            )
        ],
        responses=_responses(
            {201: WorkloadSerializer, 200: WorkloadSerializer}, 400, 403, 409, 422
        ),
    )
    def post(self, request: Request) -> Response:
        tenant = self.tenant(request)
        serializer = WorkloadCreateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        key = request.headers.get("Idempotency-Key", "").strip() or None
        if key is not None and len(key) > 255:
            raise InvalidInput.one("Idempotency-Key", "at most 255 characters")
        workload, created = api_services.workload_create(
            tenant=tenant,
            name=data["name"],
            pod_sets=data["podSets"],
            queue_name=data.get("queueName"),
            priority=data["priority"],
            priority_class_name=data["priorityClassName"],
            service_class=data["serviceClass"],
            maximum_execution_time_s=data["maximumExecutionTimeSeconds"],
            idempotency_key=key,
            fingerprint=api_services.request_fingerprint(request.data),
        )
        return _workload_response(workload, status.HTTP_201_CREATED if created else 200)


class WorkloadListApi(TenantApi):
    class FilterSerializer(PageQuerySerializer):
        state = serializers.CharField(required=False, help_text="comma-separated states")
        queueName = serializers.CharField(required=False, max_length=63)
        priorityClassName = serializers.CharField(required=False, max_length=63)
        serviceClass = serializers.ChoiceField(
            choices=[c.value for c in ServiceClass], required=False
        )
        namePrefix = serializers.CharField(required=False, max_length=63)
        createdAfter = serializers.DateTimeField(required=False)
        createdBefore = serializers.DateTimeField(required=False)

        def validate_state(self, value: str) -> list[str]:
            states = [s.strip() for s in value.split(",") if s.strip()]
            unknown = [s for s in states if s not in Workload.State.values]
            if unknown:
                raise serializers.ValidationError(
                    f"unknown state {unknown[0]!r} (states: {', '.join(Workload.State.values)})"
                )
            return states

    class OutputSerializer(PageSerializer):
        items = WorkloadSerializer(many=True)

    @extend_schema(
        operation_id="workload_list",
        summary="List the tenant's workloads, newest first",
        parameters=[FilterSerializer],
        responses=_responses(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        tenant = self.tenant(request)
        params = _query(WorkloadListApi.FilterSerializer, request)
        filters = selectors.WorkloadFilters(
            states=params.get("state") or (),
            queue_name=params.get("queueName"),
            priority_class_name=params.get("priorityClassName"),
            service_class=params.get("serviceClass"),
            name_prefix=params.get("namePrefix"),
            created_after=params.get("createdAfter"),
            created_before=params.get("createdBefore"),
        )
        rows, next_cursor = _page(
            selectors.workloads_of(tenant, filters), "id", params, descending=True
        )
        counts = selectors.pod_phase_counts(w.pk for w in rows)
        items = [workload_doc(w, tenant.namespace, counts.get(w.pk, {})) for w in rows]
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
        responses=_responses(WorkloadSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        return _workload_response(selectors.workload_get(self.tenant(request), name))


class WorkloadCancelApi(TenantApi):
    @extend_schema(
        operation_id="workload_cancel",
        summary="Cancel a workload: its pods stop and release what they hold",
        request=None,
        responses=_responses(WorkloadSerializer, 403, 404, 409),
    )
    def post(self, request: Request, name: str) -> Response:
        workload = selectors.workload_get(self.tenant(request), name)
        return _workload_response(api_services.workload_cancel(workload=workload))


class PodGpuSerializer(serializers.Serializer):
    index = serializers.IntegerField()
    uuid = serializers.CharField(allow_blank=True)
    model = serializers.CharField(allow_blank=True)
    milli = serializers.IntegerField()
    migSlot = serializers.IntegerField(allow_null=True)


class WorkloadPodsApi(TenantApi):
    class OutputSerializer(serializers.Serializer):
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
        summary="The workload's pods and where they are placed (node, GPU ids, topology scope)",
        responses=_responses(OutputSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        workload = selectors.workload_get(self.tenant(request), name)
        items = [_pod_doc(view) for view in selectors.workload_pods(workload)]
        return Response(WorkloadPodsApi.OutputSerializer({"items": items}).data)


def _pod_requests(pod: Pod) -> dict[str, str]:
    out = {
        "cpu": selectors.format_amount("cpu", pod.cpu_milli),
        "memory": selectors.format_amount("memory", pod.memory_mib),
    }
    if pod.gpus:
        out["nvidia.com/gpu"] = str(pod.gpus)
    if pod.gpu_milli:
        out["gpusched.io/gpu-milli"] = str(pod.gpu_milli)
    if pod.mig_count:
        out[f"nvidia.com/mig-{pod.mig_profile}"] = str(pod.mig_count)
    return out


def _pod_doc(view: selectors.PodView) -> dict[str, Any]:
    pod = view.pod
    return {
        "name": pod.name,
        "podSet": pod.pod_set,
        "phase": pod.phase,
        "requests": _pod_requests(pod),
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
    class OutputSerializer(serializers.Serializer):
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
        responses=_responses(OutputSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        workload = selectors.workload_get(self.tenant(request), name)
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
            for d in selectors.workload_decisions(workload)
        ]
        return Response(WorkloadPlacementsApi.OutputSerializer({"items": items}).data)


class WorkloadPendingStatusApi(TenantApi):
    class OutputSerializer(serializers.Serializer):
        class ReasonSerializer(serializers.Serializer):
            reason = serializers.CharField()
            nodes = serializers.IntegerField()

        name = serializers.CharField()
        state = serializers.CharField()
        queueName = serializers.CharField()
        waiting = serializers.BooleanField()
        position = serializers.IntegerField(allow_null=True, help_text="1 = next")
        clusterQueue = serializers.CharField(allow_null=True)
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

    @extend_schema(
        operation_id="workload_pending_status",
        summary="Why the workload waits: position, reason, per-filter summary, start estimate",
        responses=_responses(OutputSerializer, 403, 404),
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
            "reason": s.reason,
            "message": s.message,
            "podsPending": s.pods_pending,
            "attempts": s.attempts,
            "lastAttemptAt": s.last_attempt_at,
            "nodes": s.nodes,
            "feasibleNodes": s.feasible_nodes,
            "reasons": [{"reason": r.reason, "nodes": r.nodes} for r in s.reasons],
            "lastDecision": s.last_decision,
            "estimatedStart": s.estimated_start,
        }
        return Response(WorkloadPendingStatusApi.OutputSerializer(doc).data)


# --- quota, usage, queues, flavors ---------------------------------------------------------------


class LimitsSerializer(serializers.Serializer):
    defaultRequests = quantity_map(required=False, default=dict)
    minPerPod = quantity_map(required=False, default=dict)
    maxPerPod = quantity_map(required=False, default=dict)


class TenantQuotaApi(TenantApi):
    class OutputSerializer(serializers.Serializer):
        tenant = serializers.CharField()
        namespace = serializers.CharField()
        queueNames = serializers.ListField(child=serializers.CharField())
        hard = serializers.DictField(child=serializers.CharField())
        used = serializers.DictField(child=serializers.CharField())
        limits = LimitsSerializer()

    @extend_schema(
        operation_id="quota_retrieve",
        summary="The tenant's hard quota, what its active pods request, and its per-pod limits",
        responses=_responses(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        tenant = self.tenant(request)
        view = selectors.tenant_quota(tenant)
        doc = {
            "tenant": tenant.name,
            "namespace": tenant.namespace,
            "queueNames": view.queue_names,
            "hard": view.hard,
            "used": view.used,
            "limits": view.limits,
        }
        return Response(TenantQuotaApi.OutputSerializer(doc).data)


_WINDOW = re.compile(r"^(\d{1,6})([smhd])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_window(text: str) -> timedelta:
    match = _WINDOW.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise serializers.ValidationError("a duration such as 30m, 1h or 7d")
    window = timedelta(seconds=int(match.group(1)) * _UNITS[match.group(2)])
    if window > MAX_USAGE_WINDOW:
        raise serializers.ValidationError("at most 7d")
    return window


class TenantUsageApi(TenantApi):
    class FilterSerializer(StrictSerializer):
        window = serializers.CharField(required=False, default="1h", help_text="30m, 1h, 7d")

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
        responses=_responses(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        tenant = self.tenant(request)
        window = _query(TenantUsageApi.FilterSerializer, request)["window"]
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


class LocalQueueSerializer(serializers.Serializer):
    name = serializers.CharField()
    namespace = serializers.CharField()
    tenant = serializers.CharField()
    clusterQueue = serializers.CharField(
        allow_null=True, help_text="null: no such LocalQueue (its workloads are inadmissible)"
    )
    pendingWorkloads = serializers.IntegerField()
    admittedWorkloads = serializers.IntegerField()
    runningWorkloads = serializers.IntegerField()


def _queue_docs(tenant: Tenant | None) -> list[dict[str, Any]]:
    return [
        {
            "name": lq.name,
            "namespace": lq.namespace,
            "tenant": lq.tenant,
            "clusterQueue": lq.cluster_queue,
            "pendingWorkloads": lq.pending,
            "admittedWorkloads": lq.admitted,
            "runningWorkloads": lq.running,
        }
        for lq in selectors.local_queues(tenant)
    ]


class LocalQueueListApi(TenantApi):
    class OutputSerializer(serializers.Serializer):
        items = LocalQueueSerializer(many=True)

    @extend_schema(
        operation_id="queue_list",
        summary="The tenant's local queues and their workload counts",
        responses=_responses(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        items = _queue_docs(self.tenant(request))
        return Response(LocalQueueListApi.OutputSerializer({"items": items}).data)


class FlavorListApi(APIView):
    permission_classes = [IsTenant | IsAdmin]

    class OutputSerializer(serializers.Serializer):
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
        items = FlavorSerializer(many=True, help_text="ResourceFlavors (else one per GPU model)")
        gpuModels = FlavorSerializer(many=True, help_text="the same capacity per GPU model")

    @extend_schema(
        operation_id="flavor_list",
        summary="GPU flavors (by model) and their free capacity",
        responses=_responses(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        cap = selectors.capacity()
        doc = {
            "nodes": cap.nodes,
            "schedulableNodes": cap.schedulable_nodes,
            "cpuFree": selectors.format_amount("cpu", cap.cpu_milli_free),
            "memoryFree": selectors.format_amount("memory", cap.memory_mib_free),
            "items": [_flavor_doc(f) for f in cap.flavors],
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


# --- admin: tenants and tokens ------------------------------------------------------------------


class PolicySerializer(serializers.Serializer):
    queueName = serializers.CharField()
    hard = serializers.DictField(child=serializers.CharField())
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
            "hard": p.hard,
            "defaultRequests": p.default_requests,
            "minPerPod": p.min_per_pod,
            "maxPerPod": p.max_per_pod,
        },
    }


class TenantListApi(AdminApi):
    class OutputSerializer(serializers.Serializer):
        items = TenantSerializer(many=True)

    @extend_schema(
        operation_id="admin_tenant_list",
        summary="Every tenant",
        responses=_responses(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        items = [_tenant_doc(s) for s in selectors.tenants_list()]
        return Response(TenantListApi.OutputSerializer({"items": items}).data)


class TenantCreateApi(AdminApi):
    class InputSerializer(StrictSerializer):
        name = dns_label()
        namespace = dns_label(required=False)
        queueName = dns_label(
            required=False, help_text="its LocalQueue; default: the tenant's name"
        )
        quota = quantity_map(
            required=False,
            default=dict,
            help_text="nominal quota of the tenant's own ClusterQueue, e.g. nvidia.com/gpu: '16'",
        )
        cohortName = dns_label(required=False, default="")
        flavor = dns_label(required=False, help_text="ResourceFlavor of the quota")
        clusterQueue = dns_label(
            required=False, help_text="share this existing ClusterQueue instead of a new one"
        )
        hard = quantity_map(
            required=False, default=dict, help_text="hard cap on total requests, ResourceQuota-like"
        )
        defaultRequests = quantity_map(required=False, default=dict)
        minPerPod = quantity_map(required=False, default=dict)
        maxPerPod = quantity_map(required=False, default=dict)

    class OutputSerializer(serializers.Serializer):
        tenant = TenantSerializer()
        token = serializers.CharField(help_text="shown once; only its digest is stored")
        queueName = serializers.CharField()

    @extend_schema(
        operation_id="admin_tenant_create",
        summary="Create a tenant with its queue, limits and first API token",
        request=InputSerializer,
        responses=_responses({201: OutputSerializer}, 400, 403, 409),
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
            hard=data["hard"],
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
        responses=_responses(TenantSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        summary = selectors.tenant_summary(selectors.tenant_get(name))
        return Response(TenantSerializer(_tenant_doc(summary)).data)


class TenantPolicyUpdateApi(AdminApi):
    class InputSerializer(StrictSerializer):
        queueName = dns_label(required=False)
        hard = quantity_map(required=False, default=dict)
        defaultRequests = quantity_map(required=False, default=dict)
        minPerPod = quantity_map(required=False, default=dict)
        maxPerPod = quantity_map(required=False, default=dict)

    @extend_schema(
        operation_id="admin_tenant_policy_update",
        summary="Replace a tenant's limits (LimitRange-like) and hard quota (ResourceQuota-like)",
        request=InputSerializer,
        responses=_responses(TenantSerializer, 400, 403, 404),
    )
    def put(self, request: Request, name: str) -> Response:
        tenant = selectors.tenant_get(name)
        serializer = TenantPolicyUpdateApi.InputSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        api_services.tenant_policy_set(
            tenant=tenant,
            queue_name=data.get("queueName"),
            hard=data["hard"],
            default_requests=data["defaultRequests"],
            min_per_pod=data["minPerPod"],
            max_per_pod=data["maxPerPod"],
        )
        return Response(TenantSerializer(_tenant_doc(selectors.tenant_summary(tenant))).data)


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
    class OutputSerializer(serializers.Serializer):
        items = TokenSerializer(many=True)

    @extend_schema(
        operation_id="admin_tenant_token_list",
        summary="A tenant's API tokens (never the tokens themselves)",
        responses=_responses(OutputSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        tokens = selectors.tenant_tokens(selectors.tenant_get(name))
        items = [_token_doc(t) for t in tokens]
        return Response(TenantTokenListApi.OutputSerializer({"items": items}).data)


class TenantTokenCreateApi(AdminApi):
    class InputSerializer(StrictSerializer):
        name = serializers.CharField(max_length=63, required=False, default="", allow_blank=True)

    class OutputSerializer(TokenSerializer):
        token = serializers.CharField(help_text="shown once; only its digest is stored")

    @extend_schema(
        operation_id="admin_tenant_token_create",
        summary="Issue a new API token for a tenant",
        request=InputSerializer,
        responses=_responses({201: OutputSerializer}, 400, 403, 404),
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
        responses=_responses(TokenSerializer, 403, 404),
    )
    def post(self, request: Request, token_id: int) -> Response:
        token = ApiToken.objects.filter(pk=token_id).first()
        if token is None:
            raise NotFound(f"token {token_id} not found")
        return Response(TokenSerializer(_token_doc(api_services.token_revoke(token=token))).data)


class AdminLocalQueueListApi(AdminApi):
    class OutputSerializer(serializers.Serializer):
        items = LocalQueueSerializer(many=True)

    @extend_schema(
        operation_id="admin_local_queue_list",
        summary="Every tenant's local queues and their workload counts",
        responses=_responses(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        return Response(AdminLocalQueueListApi.OutputSerializer({"items": _queue_docs(None)}).data)


class ClusterQueueListApi(AdminApi):
    class OutputSerializer(serializers.Serializer):
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
            flavorsUsage = FlavorUsageSerializer(many=True)

        items = ClusterQueueSerializer(many=True)

    @extend_schema(
        operation_id="admin_cluster_queue_list",
        summary="Cluster queues: quotas, cohort, preemption, usage, borrowing and fair share",
        responses=_responses(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        items = [_cluster_queue_doc(*row) for row in selectors.cluster_queues()]
        return Response(ClusterQueueListApi.OutputSerializer({"items": items}).data)


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


class PriorityClassListApi(APIView):
    permission_classes = [IsTenant | IsAdmin]

    class OutputSerializer(serializers.Serializer):
        class PriorityClassSerializer(serializers.Serializer):
            name = serializers.CharField()
            value = serializers.IntegerField()
            preemptionPolicy = serializers.CharField()
            globalDefault = serializers.BooleanField()
            description = serializers.CharField(allow_blank=True)

        items = PriorityClassSerializer(many=True)

    @extend_schema(
        operation_id="priority_class_list",
        summary="Priority classes a workload may name (priorityClassName)",
        responses=_responses(OutputSerializer, 403),
    )
    def get(self, request: Request) -> Response:
        items = [
            {
                "name": pc.name,
                "value": pc.value,
                "preemptionPolicy": pc.preemption_policy,
                "globalDefault": pc.global_default,
                "description": pc.description,
            }
            for pc in selectors.priority_classes()
        ]
        return Response(PriorityClassListApi.OutputSerializer({"items": items}).data)


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
    class FilterSerializer(PageQuerySerializer):
        cordoned = serializers.BooleanField(required=False, allow_null=True, default=None)
        gpuModel = serializers.CharField(required=False, max_length=128)

    class OutputSerializer(PageSerializer):
        items = NodeSerializer(many=True)

    @extend_schema(
        operation_id="admin_node_list",
        summary="Nodes by name, with their GPUs and what is used",
        parameters=[FilterSerializer],
        responses=_responses(OutputSerializer, 400, 403),
    )
    def get(self, request: Request) -> Response:
        params = _query(NodeListApi.FilterSerializer, request)
        qs = selectors.nodes_query(cordoned=params["cordoned"], gpu_model=params.get("gpuModel"))
        rows, next_cursor = _page(qs, "name", params, descending=False)
        gpus = selectors.node_gpus(rows)
        items = [_node_doc(n, gpus.get(n.pk, [])) for n in rows]
        return Response(
            NodeListApi.OutputSerializer({"items": items, "nextCursor": next_cursor}).data
        )


class NodeDetailApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_retrieve",
        summary="One node",
        responses=_responses(NodeSerializer, 403, 404),
    )
    def get(self, request: Request, name: str) -> Response:
        return _node_response(selectors.node_get(name))


class NodeCordonApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_cordon",
        summary="Cordon a node: nothing new is placed on it",
        request=None,
        responses=_responses(NodeSerializer, 403, 404),
    )
    def post(self, request: Request, name: str) -> Response:
        node = api_services.node_cordon(node=selectors.node_get(name), cordoned=True)
        return _node_response(node)


class NodeUncordonApi(AdminApi):
    @extend_schema(
        operation_id="admin_node_uncordon",
        summary="Uncordon a node",
        request=None,
        responses=_responses(NodeSerializer, 403, 404),
    )
    def post(self, request: Request, name: str) -> Response:
        node = api_services.node_cordon(node=selectors.node_get(name), cordoned=False)
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
        summary="Drain a node: cordon it and evict (requeue) the workloads holding anything on it",
        request=None,
        responses=_responses(OutputSerializer, 403, 404),
    )
    def post(self, request: Request, name: str) -> Response:
        node, evicted = api_services.node_drain(node=selectors.node_get(name))
        node.refresh_from_db()
        doc = {
            "node": _node_doc(node, selectors.node_gpus([node]).get(node.pk, [])),
            "evictedWorkloads": [f"{w.tenant.name}/{w.name}" for w in evicted],
        }
        return Response(NodeDrainApi.OutputSerializer(doc).data)
