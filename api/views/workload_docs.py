"""Workload documents: the submitted shape (the short pod template, or a Kubernetes
PodTemplateSpec) and the Kueue-shaped workload the API returns (status.admission with
podSetAssignments, conditions)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from fractions import Fraction
from typing import Any

from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema_field
from rest_framework import serializers

from api import selectors
from api.exceptions import REFUSED, InvalidInput
from api.fields import (
    LabelKeyField,
    LabelMapField,
    LabelValueField,
    ResourceMapField,
    StrictSerializer,
    dns_label,
)
from api.views.common import (
    ConditionSerializer,
)
from scheduling.core import limits
from scheduling.core.pod_spec import (
    ANNOTATION_MODELS,
    ANNOTATION_POLICY,
    ANNOTATION_SCOPE,
    TranslationError,
    effective_requests,
)
from scheduling.core.types import TaintEffect, TopologyPolicy, TopologyScope
from scheduling.models import Pod, Workload

MAX_CONTAINERS = 16
MAX_ANNOTATIONS = 64
MAX_ANNOTATION_LENGTH = 1024

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


class ContainerResourcesSerializer(StrictSerializer):
    requests = ResourceMapField(required=False, default=dict)
    limits = ResourceMapField(
        required=False, default=dict, help_text="requests default to limits, as in Kubernetes"
    )


class ContainerSerializer(serializers.Serializer):
    """A container of a PodTemplateSpec. Only what scheduling reads is kept; the rest of a
    Kubernetes container (image, command, env, ...) is accepted and not stored."""

    name = dns_label(required=False)
    resources = ContainerResourcesSerializer(required=False)
    restartPolicy = serializers.ChoiceField(
        choices=["Always"], required=False, help_text="an init container that is a sidecar"
    )


class PodSpecSerializer(serializers.Serializer):
    """The part of a Kubernetes PodSpec scheduling reads (the rest is accepted and not stored).
    Requests are the kubelet's sum: containers, sidecars, the largest init container, overhead."""

    containers = serializers.ListField(
        child=ContainerSerializer(), min_length=1, max_length=MAX_CONTAINERS
    )
    initContainers = serializers.ListField(
        child=ContainerSerializer(), required=False, max_length=MAX_CONTAINERS
    )
    overhead = ResourceMapField(required=False)
    nodeSelector = LabelMapField(required=False)
    tolerations = serializers.ListField(
        child=TolerationSerializer(), required=False, max_length=limits.MAX_TOLERATIONS
    )

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            # Refused, never ignored: gpusched judges nodes one by one (nodeSelector), not
            # affinities or spreading against other pods.
            unjudged = {
                key: ["not supported by gpusched's API; use nodeSelector"]
                for key in ("affinity", "topologySpreadConstraints")
                if data.get(key)
            }
            if unjudged:
                raise serializers.ValidationError(unjudged)
        return super().to_internal_value(data)


class TemplateMetadataSerializer(serializers.Serializer):
    annotations = serializers.DictField(
        child=serializers.CharField(max_length=MAX_ANNOTATION_LENGTH, allow_blank=True),
        required=False,
        help_text=f"{ANNOTATION_POLICY} (none, best-effort, restricted, single-numa-node), "
        f"{ANNOTATION_SCOPE} (nvlink, pcie, numa, node), {ANNOTATION_MODELS} (comma-separated "
        "GPU models); others are ignored",
    )
    labels = LabelMapField(required=False)

    def validate_annotations(self, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_ANNOTATIONS:
            raise serializers.ValidationError(f"at most {MAX_ANNOTATIONS} annotations")
        return value


class ShortPodTemplateSerializer(StrictSerializer):
    """gpusched's short form of a pod template."""

    resources = ResourcesSerializer(required=False)
    gpuModels = serializers.ListField(
        # A name is trimmed, and one of nothing but whitespace is refused as blank: the schema
        # says so with its pattern (at least one character that is not whitespace).
        child=serializers.RegexField(r"\S", max_length=limits.MAX_GPU_MODEL_LENGTH),
        required=False,
        max_length=limits.MAX_GPU_MODELS,
    )
    topology = TopologySerializer(required=False)
    nodeSelector = LabelMapField(required=False)
    tolerations = serializers.ListField(
        child=TolerationSerializer(), required=False, max_length=limits.MAX_TOLERATIONS
    )


class PodTemplateSpecSerializer(StrictSerializer):
    """A Kubernetes PodTemplateSpec, as Kueue's Workload carries it; read into the short form."""

    metadata = TemplateMetadataSerializer(required=False)
    spec = PodSpecSerializer()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return short_form(attrs["spec"], (attrs.get("metadata") or {}).get("annotations") or {})


@extend_schema_field(
    PolymorphicProxySerializer(
        component_name="PodTemplate",
        serializers=[ShortPodTemplateSerializer, PodTemplateSpecSerializer],
        resource_type_field_name=None,
    )
)
class PodTemplateField(serializers.Field):
    """Either form of a pod template: with `spec`, a PodTemplateSpec; else the short form."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, Mapping):
            raise serializers.ValidationError("must be an object")
        form = PodTemplateSpecSerializer if "spec" in data else ShortPodTemplateSerializer
        serializer = form(data=data)
        serializer.is_valid(raise_exception=True)
        return serializer.validated_data


def short_form(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> dict[str, Any]:
    """A PodTemplateSpec's spec and annotations as the short form (validated like it)."""
    try:
        requests = effective_requests(spec)
    except TranslationError as exc:
        # The quantities' form was checked with the spec's fields: what is left is their value.
        raise serializers.ValidationError({"spec": [str(exc)]}, code=REFUSED) from None
    out: dict[str, Any] = {
        "resources": {"requests": {r: _quantity_text(r, v) for r, v in requests.items()}}
    }
    errors: dict[str, list[str]] = {}
    topology: dict[str, str] = {}
    for key, field, choices in (
        (ANNOTATION_POLICY, "policy", [p.value for p in TopologyPolicy]),
        (ANNOTATION_SCOPE, "scope", [s.value for s in TopologyScope]),
    ):
        value = annotations.get(key)
        if value is None:
            continue
        if value not in choices:
            errors[f"metadata.annotations.{key}"] = [f"one of {', '.join(choices)}"]
        topology[field] = value
    if errors:
        raise serializers.ValidationError(errors)
    if topology:
        out["topology"] = topology
    models = [m.strip() for m in annotations.get(ANNOTATION_MODELS, "").split(",") if m.strip()]
    if models:
        out["gpuModels"] = models
    if spec.get("nodeSelector"):
        out["nodeSelector"] = dict(spec["nodeSelector"])
    if spec.get("tolerations"):
        out["tolerations"] = list(spec["tolerations"])
    return out


def _quantity_text(resource: str, amount: Fraction) -> str:
    """A summed quantity back as text the short form's parser reads (CPU in millicores)."""
    if resource == "cpu" and amount.denominator != 1:
        return f"{math.ceil(amount * 1000)}m"
    if amount.denominator == 1:
        return str(amount.numerator)
    return str(float(amount))


class PodSetTopologyRequestSerializer(StrictSerializer):
    """Kueue's Workload podSets[].topologyRequest: where across nodes the pod set goes, by a
    level (a node label) of its flavor's Topology. Its fields are declared in `get_fields`: one
    is named `required`, which a declared attribute would take from DRF's Field."""

    def get_fields(self) -> dict[str, serializers.Field]:
        def level(help_text: str) -> serializers.CharField:
            return serializers.CharField(required=False, max_length=316, help_text=help_text)

        return {
            "required": level("every pod in one domain of this level"),
            "preferred": level("the tightest domain that holds the set, from this level up"),
            "unconstrained": serializers.BooleanField(required=False, help_text="capacity only"),
            "podSetSliceRequiredTopology": level("each slice in one domain of this level"),
            "podSetSliceSize": serializers.IntegerField(
                required=False, min_value=1, max_value=1000, help_text="pods per slice"
            ),
        }


class PodSetSerializer(StrictSerializer):
    name = dns_label()
    count = serializers.IntegerField(min_value=1, max_value=1000)
    minCount = serializers.IntegerField(
        min_value=1, max_value=1000, required=False, allow_null=True
    )
    template = PodTemplateField()
    topologyRequest = PodSetTopologyRequestSerializer(required=False)


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


class PodSetAssignmentSerializer(serializers.Serializer):
    name = serializers.CharField()
    flavors = serializers.DictField(child=serializers.CharField(), help_text="resource -> flavor")
    resourceUsage = serializers.DictField(
        child=serializers.CharField(), help_text="resource -> quantity, the whole pod set"
    )
    count = serializers.IntegerField()


class AdmissionSerializer(serializers.Serializer):
    """Kueue's status.admission."""

    clusterQueue = serializers.CharField()
    podSetAssignments = PodSetAssignmentSerializer(many=True)


class RequeueStateSerializer(serializers.Serializer):
    """Kueue's status.requeueState: pods-ready timeouts so far, and when it may queue again."""

    count = serializers.IntegerField()
    requeueAt = serializers.DateTimeField(allow_null=True)


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
    pendingReason = serializers.CharField(
        allow_blank=True, help_text="why it waits (empty once it ended or nothing holds it)"
    )
    reason = serializers.CharField(allow_blank=True)
    admission = AdmissionSerializer(allow_null=True)
    admittedAt = serializers.DateTimeField(allow_null=True)
    finishedAt = serializers.DateTimeField(allow_null=True)
    evictions = serializers.IntegerField()
    requeueState = RequeueStateSerializer(allow_null=True)
    pods = PodCountsSerializer()
    conditions = ConditionSerializer(
        many=True,
        help_text="QuotaReserved, Admitted, PodsReady, Evicted (Preempted, PodsReadyTimeout, "
        "InactiveWorkload, ClusterQueueStopped, LocalQueueStopped), Requeued, Finished",
    )
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


def workload_doc(
    w: Workload,
    namespace: str,
    pods: Mapping[str, int],
    assignments: Sequence[selectors.PodSetAssignment] = (),
    now: datetime | None = None,
) -> dict[str, Any]:
    counts = {phase.value.lower(): pods.get(phase.value, 0) for phase in Pod.Phase}
    ended = w.state not in Workload.ACTIVE_STATES
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
            "pendingReason": "" if ended else w.pending_reason,
            "reason": "" if ended else w.reason,
            "admission": {
                "clusterQueue": w.cluster_queue.name,
                "podSetAssignments": [
                    {
                        "name": a.name,
                        "flavors": a.flavors,
                        "resourceUsage": a.resource_usage,
                        "count": a.count,
                    }
                    for a in assignments
                ],
            }
            if w.cluster_queue is not None
            else None,
            "admittedAt": w.admitted_at,
            "finishedAt": w.finished_at,
            "evictions": w.evictions,
            "requeueState": {"count": w.requeue_count, "requeueAt": w.requeue_at}
            if w.requeue_count
            else None,
            "pods": {"total": sum(pods.values()), **counts},
            "conditions": [
                {
                    "type": c.type,
                    "status": "True" if c.status else "False",
                    "reason": c.reason,
                    "message": c.message,
                    "lastTransitionTime": c.at,
                }
                for c in selectors.workload_conditions(w, pods, now)
            ],
            **_estimates(w),
        },
    }


def _estimates(w: Workload) -> dict[str, Any]:
    """What the scheduler last predicted for a waiting workload (scheduling.worker.estimates)."""
    estimate = selectors.start_estimate(w)
    if estimate is None:
        return {"runtimePrediction": None, "estimatedStart": None}
    prediction = (
        None
        if estimate.runtime_p50_s is None or estimate.runtime_p90_s is None
        else {
            "p50Seconds": estimate.runtime_p50_s,
            "p90Seconds": estimate.runtime_p90_s,
            "basis": estimate.runtime_basis,
        }
    )
    start = {"p50": estimate.p50, "p90": estimate.p90, "unknownReason": estimate.unknown_reason}
    return {"runtimePrediction": prediction, "estimatedStart": start}


def _priority_ref(w: Workload) -> dict[str, str] | None:
    if not w.priority_class_name:
        return None
    kind = w.priority_class_kind or "WorkloadPriorityClass"
    group = next(g for g, k in PRIORITY_GROUPS.items() if k == kind)
    return {"group": group, "kind": kind, "name": w.priority_class_name}
