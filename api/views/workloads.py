"""A tenant's workloads: submit, list, read and cancel them; their pods, placements and pending
status."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.throttling import BaseThrottle

from api import selectors
from api import services as api_services
from api.exceptions import InvalidInput
from api.fields import (
    LabelKeyField,
    LabelMapField,
    LabelValueField,
    ResourceMapField,
    StrictSerializer,
    dns_label,
)
from api.throttling import PrincipalRateThrottle, SubmitRateThrottle
from api.views.common import (
    ConditionSerializer,
    IdPageQuerySerializer,
    PageSerializer,
    TenantApi,
    documented,
    keyset_page,
    query_of,
)
from scheduling.core import limits
from scheduling.core.queueing.resources import format_quantity
from scheduling.core.types import ServiceClass, TaintEffect, TopologyPolicy, TopologyScope
from scheduling.models import Pod, Workload

MAX_IDEMPOTENCY_KEY = 255
_STATE = "|".join(Workload.State.values)
STATES_PATTERN = rf"^ *({_STATE}) *(, *({_STATE}) *)*$"

# --- workload documents -------------------------------------------------------------------------


class TolerationSerializer(StrictSerializer):
    key = LabelKeyField(allow_blank=True, required=False, default="")
    operator = serializers.ChoiceField(choices=["Equal", "Exists"], default="Equal")
    value = LabelValueField(required=False, default="")
    effect = serializers.ChoiceField(
        choices=["", *(e.value for e in TaintEffect)], required=False, default=""
    )


class ResourcesSerializer(StrictSerializer):
    requests = ResourceMapField(required=False, default=dict)


class TopologySerializer(StrictSerializer):
    # Omitted: the pod names no policy, and the scheduler profile's default holds.
    policy = serializers.ChoiceField(choices=[p.value for p in TopologyPolicy], required=False)
    scope = serializers.ChoiceField(choices=[s.value for s in TopologyScope], required=False)


class PodTemplateSerializer(StrictSerializer):
    resources = ResourcesSerializer(required=False)
    gpuModels = serializers.ListField(
        child=serializers.CharField(max_length=limits.MAX_GPU_MODEL_LENGTH),
        required=False,
        max_length=limits.MAX_GPU_MODELS,
    )
    topology = TopologySerializer(required=False)
    nodeSelector = LabelMapField(required=False)
    tolerations = serializers.ListField(
        child=TolerationSerializer(), required=False, max_length=limits.MAX_TOLERATIONS
    )


class PodSetSerializer(StrictSerializer):
    name = dns_label()
    count = serializers.IntegerField(min_value=1, max_value=1000)
    minCount = serializers.IntegerField(
        min_value=1, max_value=1000, required=False, allow_null=True
    )
    template = PodTemplateSerializer()


PRIORITY_GROUPS = {"kueue.x-k8s.io": "WorkloadPriorityClass", "scheduling.k8s.io": "PriorityClass"}


class PriorityClassRefSerializer(StrictSerializer):
    """Kueue's Workload spec.priorityClassRef."""

    group = serializers.ChoiceField(choices=sorted(PRIORITY_GROUPS))
    kind = serializers.ChoiceField(choices=sorted(PRIORITY_GROUPS.values()))
    name = dns_label()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if PRIORITY_GROUPS[attrs["group"]] != attrs["kind"]:  # across fields: a 422
            raise InvalidInput.one(
                "priorityClassRef.kind",
                f"group {attrs['group']} has kind {PRIORITY_GROUPS[attrs['group']]}",
            )
        return attrs


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


class RuntimePredictionSerializer(serializers.Serializer):
    p50Seconds = serializers.FloatField()
    p90Seconds = serializers.FloatField()
    basis = serializers.CharField(help_text='e.g. "p50 of 37 similar jobs (tenant vision, ...)"')


class EstimatedStartSerializer(serializers.Serializer):
    p50 = serializers.DateTimeField(allow_null=True)
    p90 = serializers.DateTimeField(allow_null=True)
    unknownReason = serializers.CharField(
        allow_blank=True, help_text="why there is no estimate (p50 and p90 null)"
    )


class WorkloadStatusSerializer(serializers.Serializer):
    state = serializers.ChoiceField(choices=Workload.State.values)
    pendingReason = serializers.CharField(allow_blank=True)
    reason = serializers.CharField(allow_blank=True)
    admission = AdmissionSerializer(allow_null=True)
    admittedAt = serializers.DateTimeField(allow_null=True)
    finishedAt = serializers.DateTimeField(allow_null=True)
    pods = PodCountsSerializer()
    conditions = ConditionSerializer(many=True)
    runtimePrediction = RuntimePredictionSerializer(
        allow_null=True,
        required=False,
        help_text="run time learnt from finished workloads (null: nothing to go by yet)",
    )
    estimatedStart = EstimatedStartSerializer(
        allow_null=True,
        required=False,
        help_text="while waiting: the queue replayed with the scheduler's core",
    )


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
    priorityClassRef = PriorityClassRefSerializer(allow_null=True)
    active = serializers.BooleanField(
        help_text="Kueue's spec.active: false evicts the workload (InactiveWorkload) and keeps "
        "it from admission"
    )
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
        "priorityClassRef": _priority_ref(w),
        "active": w.active,
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
            **_estimates(w),
        },
    }


def _estimates(w: Workload) -> dict[str, Any]:
    """What the scheduler last predicted for a waiting workload (scheduling.estimates)."""
    waiting = w.state in (Workload.State.PENDING, Workload.State.ADMITTED)
    if not waiting or w.estimated_at is None:
        return {"runtimePrediction": None, "estimatedStart": None}
    prediction = (
        None
        if w.runtime_p50_s is None or w.runtime_p90_s is None
        else {
            "p50Seconds": w.runtime_p50_s,
            "p90Seconds": w.runtime_p90_s,
            "basis": w.runtime_basis,
        }
    )
    start = {"p50": w.start_p50, "p90": w.start_p90, "unknownReason": w.start_unknown_reason}
    return {"runtimePrediction": prediction, "estimatedStart": start}


def _priority_ref(w: Workload) -> dict[str, str] | None:
    if not w.priority_class_name:
        return None
    kind = w.priority_class_kind or "WorkloadPriorityClass"
    group = next(g for g, k in PRIORITY_GROUPS.items() if k == kind)
    return {"group": group, "kind": kind, "name": w.priority_class_name}


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
            "key returns the workload made the first time (200) instead of a 409."
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
        responses=documented(OutputSerializer, 403, 404),
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
    for resource, amount in sorted((pod.extended_resources or {}).items()):
        out[resource] = format_quantity(resource, int(amount))
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
        responses=documented(OutputSerializer, 403, 404),
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
