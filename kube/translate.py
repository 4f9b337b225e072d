"""Kubernetes objects, as the API's JSON (camelCase dicts), into the core's types.

Nodes: allocatable cpu / memory / `nvidia.com/gpu` / `nvidia.com/mig-*`, GFD labels for the GPU
model, memory and sharing mode, and the topology from (in order) the profile's annotation
(`gpu-topology.nvidia.com/info`), the NodeResourceTopology object, or none (kube.node_topology).
The annotation's GPU identities (UUIDs, MIG mode, from the topology agent) name the GPUs.

Pods: the effective requests (containers summed, the largest init container, sidecars and
overhead, as the kubelet counts them: scheduling.core.pod_spec, which the REST API reads a
PodTemplateSpec with too) of cpu, memory, `nvidia.com/gpu`, `gpusched.io/gpu-milli`
and `nvidia.com/mig-<profile>`; every other resource a pod asks for (extended resources such as
`example.com/credits` or `rdma/hca`, `ephemeral-storage`, `hugepages-*`) is carried through in
the queues' units (scheduling.core.queueing.resources) so ClusterQueue quotas can count it. Kueue's
labels: `kueue.x-k8s.io/queue-name` (the LocalQueue) and `kueue.x-k8s.io/priority-class` (a
WorkloadPriorityClass, which wins over `spec.priorityClassName`). Topology and placement hints
from annotations:

    gpusched.io/topology-policy   none | best-effort | restricted | single-numa-node
    gpusched.io/topology-scope    nvlink | pcie | numa | node
    gpusched.io/gpu-models        comma-separated GPU models (GFD product names) the pod accepts
    gpusched.io/service-class     online | batch | opportunistic

Nothing here does I/O or touches the database.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from fractions import Fraction
from typing import Any, TypeVar

from kube import gfd, nrt
from kube.node_topology import Source, Unknown, node_topology
from kube.nrt import NrtError, NrtInfo
from kube.times import parse_time
from scheduling.core import limits, quantity, resource_requests
from scheduling.core.domains import DomainAsk, ask_of_annotations
from scheduling.core.gpu_sets import MAX_GPUS_PER_NODE
from scheduling.core.pod_spec import (
    ANNOTATION_MODELS,
    ANNOTATION_POLICY,
    ANNOTATION_SCOPE,
    ANNOTATION_SERVICE_CLASS,
    SHARED_GPU_RESOURCE,
    TranslationError,
    effective_requests,
    resource_quantity,
)
from scheduling.core.topology_info import TopologyInfo
from scheduling.core.types import (
    GPU_RESOURCE,
    MIG_RESOURCE_PREFIX,
    GpuDevice,
    NodeSpec,
    PodRequest,
    ServiceClass,
    SharingMode,
    Taint,
    TaintEffect,
    Toleration,
    TopologyPolicy,
    TopologyScope,
)
from scheduling.pod_template import PodTemplate

ANNOTATION_GPU_IDS = "gpusched.io/gpu-ids"  # written at bind: "0,1,2,3"
ANNOTATION_MIG_SLOTS = "gpusched.io/mig-slots"  # written at bind: "<gpu>:<slot>,..."
ANNOTATION_GPU_SHARE = "gpusched.io/gpu-share-milli"  # written at bind for GPU shares
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
# Labels that change without the node changing (GFD rewrites its timestamp every run): left out,
# so they do not make every node look new every minute.
VOLATILE_LABELS = frozenset({"nvidia.com/gfd.timestamp"})


# --- nodes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeFacts:
    spec: NodeSpec  # spec.topology is None when unknown (the snapshot then plans on a guess)
    topology_source: Source
    mig_strategy: str
    warnings: tuple[str, ...] = ()
    kubelet_policy: str = ""  # the Topology Manager policy NRT reports
    topology_unknown: Unknown | None = None  # why a GPU node has no topology facts


def node_spec(
    node: Mapping[str, Any],
    *,
    nrt: NrtInfo | None = None,
    annotation: str = "gpu-topology.nvidia.com/info",
) -> NodeFacts:
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    name = str(meta.get("name", ""))
    if not name:
        raise TranslationError("node without metadata.name")
    labels = {
        str(k): str(v) for k, v in (meta.get("labels") or {}).items() if k not in VOLATILE_LABELS
    }
    annotations = meta.get("annotations") or {}
    allocatable = status.get("allocatable") or {}
    warnings: list[str] = []

    facts = gfd.facts(labels)
    gpus = _gpu_devices(name, allocatable, facts, warnings)
    topology = node_topology(name, len(gpus), annotations.get(annotation), nrt)
    if topology.info is not None:
        gpus = _identified(gpus, topology.info)
    return NodeFacts(
        spec=NodeSpec(
            name=name,
            # What a node offers is rounded down, what a pod asks rounded up.
            cpu_milli=_units(
                _node_cpu, resource_quantity(allocatable.get("cpu", "0"), "cpu"), "cpu"
            ),
            memory_mib=_units(
                _node_memory, resource_quantity(allocatable.get("memory", "0"), "memory"), "memory"
            ),
            gpus=gpus,
            topology=topology.topology,
            labels=labels,
            taints=tuple(_taints(spec.get("taints") or [])),
            cordoned=bool(spec.get("unschedulable", False)),
        ),
        topology_source=topology.source,
        mig_strategy=facts.mig_strategy,
        warnings=tuple(warnings) + topology.warnings,
        kubelet_policy=nrt.policy if nrt else "",
        topology_unknown=topology.problem,
    )


def _identified(gpus: tuple[GpuDevice, ...], info: TopologyInfo) -> tuple[GpuDevice, ...]:
    """The agent's identities on the devices: UUIDs, and MIG-partitioned devices moved to the
    physical GPUs in MIG mode (allocatable does not say which GPUs those are)."""
    if len(info.gpus) != len(gpus):
        return gpus
    mig_slots = [k for k, identity in enumerate(info.gpus) if identity.mig]
    whole_slots = [k for k, identity in enumerate(info.gpus) if not identity.mig]
    migs = [gpu for gpu in gpus if gpu.sharing is SharingMode.MIG]
    if mig_slots and len(migs) == len(mig_slots):
        wholes = [gpu for gpu in gpus if gpu.sharing is not SharingMode.MIG]
        placed = sorted(
            [replace(g, index=k) for g, k in zip(wholes, whole_slots, strict=True)]
            + [replace(g, index=k) for g, k in zip(migs, mig_slots, strict=True)],
            key=lambda g: g.index,
        )
        gpus = tuple(placed)
    return tuple(replace(g, uuid=info.gpus[g.index].uuid or g.uuid) for g in gpus)


def _gpu_devices(
    node: str, allocatable: Mapping[str, Any], facts: gfd.GfdFacts, warnings: list[str]
) -> tuple[GpuDevice, ...]:
    whole = _count(
        resource_quantity(allocatable.get(GPU_RESOURCE, "0"), GPU_RESOURCE), GPU_RESOURCE
    )
    shared = _count(
        resource_quantity(allocatable.get(SHARED_GPU_RESOURCE, "0"), SHARED_GPU_RESOURCE),
        SHARED_GPU_RESOURCE,
    )
    layouts: list[tuple[str, ...]] = []
    if facts.mig_strategy == "single" and facts.mig_profile:
        # `nvidia.com/gpu` counts MIG devices of one profile: spread them over physical GPUs.
        slices = facts.slices_gi or gfd.profile_slices(facts.mig_profile) or 1
        per_gpu = max(1, facts.slices_per_gpu // slices)
        left = whole
        while left > 0:
            layouts.append((facts.mig_profile,) * min(per_gpu, left))
            left -= per_gpu
        whole = 0
    else:
        layouts = _pack_mig(allocatable, facts.slices_per_gpu)
        if facts.sharing.shareable:
            replicated = whole or shared
            physical = facts.count or math.ceil(replicated / max(1, facts.replicas))
            whole = min(physical, replicated) if replicated else 0
    devices = [
        GpuDevice(
            index=i,
            model=facts.model,
            memory_mib=facts.memory_mib,
            sharing=facts.sharing,
        )
        for i in range(whole)
    ]
    devices += [
        GpuDevice(
            index=whole + k,
            model=facts.model,
            sharing=SharingMode.MIG,
            mig_layout=layout,
        )
        for k, layout in enumerate(layouts)
    ]
    if len(devices) > MAX_GPUS_PER_NODE:
        warnings.append(
            f"node {node}: {len(devices)} GPUs, only the first {MAX_GPUS_PER_NODE} are scheduled"
        )
        devices = devices[:MAX_GPUS_PER_NODE]
    return tuple(devices)


def _pack_mig(allocatable: Mapping[str, Any], slices_per_gpu: int) -> list[tuple[str, ...]]:
    """Mixed strategy: `nvidia.com/mig-<profile>: n` per profile, packed first-fit decreasing into
    GPUs of `slices_per_gpu` slices (the API does not say which GPU holds which instance)."""
    instances: list[str] = []
    for resource, value in allocatable.items():
        if str(resource).startswith(MIG_RESOURCE_PREFIX):
            profile = str(resource)[len(MIG_RESOURCE_PREFIX) :]
            instances += [profile] * _count(resource_quantity(value, str(resource)), str(resource))
    instances.sort(key=lambda p: (-gfd.profile_slices(p), p))
    gpus: list[list[str]] = []
    free: list[int] = []
    for profile in instances:
        need = max(1, gfd.profile_slices(profile))
        for k, room in enumerate(free):
            if room >= need:
                gpus[k].append(profile)
                free[k] -= need
                break
        else:
            gpus.append([profile])
            free.append(slices_per_gpu - need)
    return [tuple(layout) for layout in gpus]


def _taints(raw: Iterable[Any]) -> Iterable[Taint]:
    for taint in raw:
        if not isinstance(taint, Mapping) or not taint.get("key"):
            continue
        try:
            effect = TaintEffect(str(taint.get("effect", "NoSchedule")))
        except ValueError:
            continue
        yield Taint(str(taint["key"]), str(taint.get("value", "") or ""), effect)


def parse_nrt(doc: Mapping[str, Any]) -> NrtInfo | None:
    """An NRT object, or None (with nothing raised) when it cannot be read."""
    try:
        return nrt.parse(doc)
    except NrtError:
        return None


# --- pods ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    scheduler_name: str
    node_name: str
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    gated: bool  # non-empty spec.schedulingGates: not ours to place yet
    deleting: bool  # metadata.deletionTimestamp set
    priority: int | None  # spec.priority (set by the API server from the priority class)
    priority_class_name: str
    preemption_policy: str  # spec.preemptionPolicy ("" when the API server set none)
    service_class: ServiceClass
    queue_name: str
    workload_priority_class: str  # the kueue.x-k8s.io/priority-class label
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    ask: PodTemplate | None  # None when the pod cannot be represented (see error)
    error: str = ""
    # Its pod set's topology request (Kueue's kueue.x-k8s.io/podset-*-topology annotations).
    topology: DomainAsk | None = None
    # spec.activeDeadlineSeconds: the kubelet stops it after running that long (a declared limit)
    active_deadline_s: int | None = None
    # When the kubelet started it (status.startTime) and its last container ended
    # (state.terminated.finishedAt): what a run time is, rather than when gpusched saw it run
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def pending_for(self, scheduler_name: str) -> bool:
        """Waiting for `scheduler_name` to place it: no node, no gates, not being deleted."""
        return (
            self.scheduler_name == scheduler_name
            and not self.node_name
            and not self.gated
            and not self.deleting
            and self.phase == "Pending"
        )

    def request(self) -> PodRequest:
        """The core's request (the extender's path; the scheduler reads it back from the DB)."""
        if self.ask is None:
            raise TranslationError(self.error)
        return to_request(self.uid, self.name, self.namespace, self.priority or 0, self.ask)


def pod_info(pod: Mapping[str, Any], *, ask_read: bool = True) -> PodInfo:
    """The pod as gpusched reads it. Without `ask_read` what it asks for is not read (its ask
    None, its service class and topology request the defaults): for a pod whose ask the database
    holds already (mirrored), or where only its identity and state matter; reading and
    validating the resources is most of the cost, paid again for every change of every pod."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    error = ""
    ask: PodTemplate | None = None
    topology: DomainAsk | None = None
    service_class = ServiceClass.BATCH
    try:
        if ask_read:
            service_class = _enum(
                ServiceClass, annotations.get(ANNOTATION_SERVICE_CLASS), ServiceClass.BATCH
            )
            refuse_unjudged_constraints(spec)
            ask = pod_ask(spec, annotations)
            to_request(str(meta.get("uid", "")) or "?", name, namespace, 0, ask)  # validates
            topology = ask_of_annotations(annotations)
    except (TranslationError, ValueError) as exc:  # DomainError is a ValueError
        service_class = ServiceClass.BATCH
        ask, error = None, str(exc)
    return PodInfo(
        uid=str(meta.get("uid") or ""),
        namespace=namespace,
        name=name,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        gated=bool(spec.get("schedulingGates")),
        deleting=bool(meta.get("deletionTimestamp")),
        priority=int(spec["priority"]) if spec.get("priority") is not None else None,
        priority_class_name=str(spec.get("priorityClassName") or ""),
        preemption_policy=str(spec.get("preemptionPolicy") or ""),
        service_class=service_class,
        queue_name=str(labels.get(QUEUE_LABEL) or "default"),
        workload_priority_class=str(labels.get(PRIORITY_CLASS_LABEL) or ""),
        labels={str(k): str(v) for k, v in labels.items()},
        annotations=annotations,
        ask=ask,
        error=error,
        topology=topology,
        active_deadline_s=_positive_int(spec.get("activeDeadlineSeconds")),
        started_at=_time(status.get("startTime")),
        finished_at=max(
            (
                at
                for c in status.get("containerStatuses") or []
                if (at := _time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt")))
            ),
            default=None,
        ),
    )


def _time(value: object) -> datetime | None:
    """A status timestamp; None when unset or not one (it only ever refines a time seen)."""
    try:
        return parse_time(value)
    except ValueError:
        return None


def _positive_int(value: object) -> int | None:
    """A positive integer field; None when unset (the API server refuses anything else)."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def refuse_unjudged_constraints(spec: Mapping[str, Any]) -> None:
    """What gpusched cannot judge is refused with the reason, never silently ignored: pod
    (anti-)affinity and topology spread constraints relate a pod to other pods, which the core's
    per-node filters do not see."""
    affinity = spec.get("affinity") or {}
    for kind in ("podAffinity", "podAntiAffinity"):
        if affinity.get(kind):
            raise TranslationError(
                f"spec.affinity.{kind} is not supported by gpusched (it judges nodes, not other "
                "pods); remove it or use another scheduler"
            )
    if spec.get("topologySpreadConstraints"):
        raise TranslationError(
            "spec.topologySpreadConstraints is not supported by gpusched (spreading is judged "
            "against other pods); remove it or use another scheduler"
        )


def pod_ask(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> PodTemplate:
    resources, problems = resource_requests.read(effective_requests(spec))
    for resource, problem in problems.items():
        raise TranslationError(f"{resource}: {problem}")
    raw_selector = spec.get("nodeSelector") or {}
    if not isinstance(raw_selector, Mapping):
        raise TranslationError("spec.nodeSelector must be a map")
    selector = {str(k): str(v) for k, v in _bounded_map(raw_selector, "spec.nodeSelector").items()}
    selector.update(_required_affinity(spec.get("affinity") or {}))
    _bounded_map(selector, "node selector (nodeSelector and required node affinity)")
    single_profile = gfd.mig_profile_of_product(selector.get(gfd.PRODUCT, ""))
    if single_profile and resources.gpus:
        # MIG `single` strategy: nvidia.com/gpu counts MIG devices of the selected product.
        resources = replace(resources, mig_profile=single_profile, mig_count=resources.gpus, gpus=0)
    models = tuple(
        sorted({m.strip() for m in annotations.get(ANNOTATION_MODELS, "").split(",") if m.strip()})
    )
    if len(models) > limits.MAX_GPU_MODELS or any(
        len(m) > limits.MAX_GPU_MODEL_LENGTH for m in models
    ):
        raise TranslationError(
            f"{ANNOTATION_MODELS}: at most {limits.MAX_GPU_MODELS} models of at most "
            f"{limits.MAX_GPU_MODEL_LENGTH} characters"
        )
    raw_tolerations = spec.get("tolerations") or []
    if len(raw_tolerations) > limits.MAX_TOLERATIONS:
        raise TranslationError(
            f"spec.tolerations: at most {limits.MAX_TOLERATIONS} (got {len(raw_tolerations)})"
        )
    policy_text = annotations.get(ANNOTATION_POLICY)
    policy = _enum(TopologyPolicy, policy_text, TopologyPolicy.NONE) if policy_text else None
    scope_text = annotations.get(ANNOTATION_SCOPE)
    scope = _enum(TopologyScope, scope_text, TopologyScope.NODE) if scope_text else None
    return PodTemplate(
        resources=resources,
        gpu_models=models,
        topology_policy=policy,
        topology_scope=scope,
        node_selector=selector,
        tolerations=tuple(_tolerations(raw_tolerations)),
    )


def _bounded_map(doc: Mapping[Any, Any], what: str) -> Mapping[Any, Any]:
    """`doc` if it keeps to the size limits tenants' maps have on every side
    (scheduling/core/limits.py), else a TranslationError naming the first problem."""
    problem = limits.first_problem(
        limits.map_errors(doc, max_entries=limits.MAX_SELECTOR_ENTRIES), what
    )
    if problem:
        raise TranslationError(problem)
    return doc


def _required_affinity(affinity: Mapping[str, Any]) -> dict[str, str]:
    """Required node affinity the core can express: one term whose expressions are all
    `In` with a single value (a node selector). Anything else is refused, not ignored."""
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not required:
        return {}
    terms = required.get("nodeSelectorTerms") or []
    selector: dict[str, str] = {}
    if len(terms) == 1 and not terms[0].get("matchFields"):
        for expression in terms[0].get("matchExpressions") or []:
            values = expression.get("values") or []
            if expression.get("operator") != "In" or len(values) != 1:
                break
            selector[str(expression["key"])] = str(values[0])
        else:
            return selector
    raise TranslationError(
        "required node affinity is supported only as one term of single-value In expressions; "
        "use spec.nodeSelector"
    )


def _tolerations(raw: Iterable[Any]) -> Iterable[dict[str, str]]:
    for toleration in raw:
        if not isinstance(toleration, Mapping):
            continue
        item = {
            "key": str(toleration.get("key") or ""),
            "operator": str(toleration.get("operator") or "Equal"),
            "value": str(toleration.get("value") or ""),
        }
        effect = str(toleration.get("effect") or "")
        if effect:
            item["effect"] = effect
        yield item


def to_request(uid: str, name: str, namespace: str, priority: int, ask: PodTemplate) -> PodRequest:
    return PodRequest.of(
        ask.resources,
        uid=uid,
        name=name,
        namespace=namespace,
        priority=priority,
        gpu_models=frozenset(ask.gpu_models),
        topology_policy=ask.topology_policy,
        topology_scope=ask.topology_scope,
        node_selector=dict(ask.node_selector),
        tolerations=tuple(
            Toleration(
                key=t["key"],
                operator=t["operator"],
                value=t["value"],
                effect=TaintEffect(t["effect"]) if t.get("effect") else None,
            )
            for t in ask.tolerations
        ),
    )


_E = TypeVar("_E", ServiceClass, TopologyPolicy, TopologyScope)


def _enum(kind: type[_E], value: str | None, default: _E) -> _E:
    if value is None or value == "":
        return default
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise TranslationError(f"{value!r} is not one of {allowed}") from None


def _units(convert: Callable[[Fraction], int], amount: Fraction, name: str) -> int:
    try:
        return convert(amount)
    except quantity.QuantityError as exc:
        raise TranslationError(f"{name}: {exc}") from None


def _node_cpu(amount: Fraction) -> int:
    return quantity.cpu_milli(amount, round_up=False)


def _node_memory(amount: Fraction) -> int:
    return quantity.memory_mib(amount, round_up=False)


def _count(value: Fraction, name: str) -> int:
    if value.denominator != 1:
        raise TranslationError(f"{name} must be a whole number, got {float(value):g}")
    if value > quantity.MAX_QUOTA_COUNT:
        raise TranslationError(f"{name}: {value} is more than any cluster has")
    return int(value)
