"""Dynamic Resource Allocation on the Kubernetes side (the pure part is kube.dra): what the cluster
publishes (ResourceSlices, DeviceClasses, ResourceClaims; resource.k8s.io/v1, listed every few
seconds, empty where the API group is not served), what a pod's claims ask of the core, and the
claim writes that make a placement's GPU choice the one the kubelet's DRA driver prepares.

- Nodes: a node running the DRA driver advertises its GPUs in its ResourceSlice, not as
  `nvidia.com/gpu` allocatable; such a node is scheduled on the whole-GPU devices its slice
  publishes (`dra_node`).
- Pods: a pod's claims are `spec.resourceClaims` (a `resourceClaimName`, or a claim made from a
  `resourceClaimTemplateName`, named in `status.resourceClaimStatuses`). Their GPUs become the
  pod's ask (`ask_of`): the requests' counts, their `productName` as the GPU model, and
  `matchAttribute` pcieRoot / numaNode as the topology policy `restricted` with that scope. A
  claim already allocated pins the pod to its node and brings its own devices. Refused, with the
  field named: what kube.dra refuses, `allocationMode: All` (its count depends on the node),
  selectors on attributes that tell one GPU of a node from another (gpusched chooses among a
  node's GPUs itself), a pod asking GPUs both through `nvidia.com/gpu` and claims, a claim
  reserved for another pod (shared claims).
- Binding (`reserve`): before the Binding, as kube-scheduler's DynamicResources plugin does in
  PreBind, each claim gets the finalizer `resource.kubernetes.io/delete-protection` (an update),
  then one status update with `allocation` (the chosen GPUs' devices) and the pod in
  `reservedFor`. Both carry the resourceVersion read just before: a claim someone else changed
  meanwhile answers 409 and the bind is refused. A device another claim holds is never written.
  A refused pod's allocations made in this attempt are taken back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kube.api import KubeApi
from kube.dra import (
    FINALIZER,
    PCI_BUS_ID,
    DeviceClass,
    DeviceMap,
    DraError,
    SliceView,
    allocated_keys,
    allocation_status,
    claim_ask,
    device_class,
    devices_by_node,
    map_devices,
    reserved_for,
)
from kube.informer import PeriodicList
from kube.translate import PodInfo
from scheduling.core.types import GPU_RESOURCE, NodeSpec, TopologyPolicy, TopologyScope
from scheduling.pod_template import PodTemplate

logger = logging.getLogger(__name__)

Obj = dict[str, Any]
DeviceKey = tuple[str, str, str]
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Attributes whose value differs between the GPUs of one node: a selector on them picks GPUs,
# which is gpusched's choice (by topology), so such claims are refused rather than half-honoured.
PER_GPU_ATTRIBUTES = frozenset(
    {
        "gpu.nvidia.com/index",
        "gpu.nvidia.com/minor",
        "gpu.nvidia.com/uuid",
        "gpu.nvidia.com/pcieBusID",
        "resource.kubernetes.io/pcieRoot",
        "resource.kubernetes.io/numaNode",
        PCI_BUS_ID,
    }
)


class ClaimsPending(Exception):
    """A claim of the pod does not exist yet (its template's claim is being made)."""


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ReserveOutcome:
    ok: bool
    status: int = 200
    message: str = ""
    gpu_indices: tuple[int, ...] = ()  # the GPUs the claims hold on the node, once written
    written: tuple[ClaimRef, ...] = ()  # the claims this attempt wrote (taken back if it fails)


def claim_refs(pod: Mapping[str, Any]) -> list[ClaimRef]:
    """The pod's claims by name; ClaimsPending while a template's claim is not made yet."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    made = {
        s.get("name"): s.get("resourceClaimName")
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    refs = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = entry.get("resourceClaimName") or made.get(entry.get("name"))
        if not name:
            raise ClaimsPending(f"claim {entry.get('name')}: its ResourceClaim is not made yet")
        refs.append(ClaimRef(namespace, str(name)))
    return refs


def gfd_model(product: str) -> str:
    """A DRA `productName` as GPU Feature Discovery spells the model in `nvidia.com/gpu.product`
    (the node's model in gpusched): spaces become dashes."""
    return product.strip().replace(" ", "-")


def dra_node(node: Mapping[str, Any], devices: Sequence[Any]) -> Mapping[str, Any]:
    """The node as gpusched reads it: with DRA, its GPUs are the whole-GPU devices of its
    slices (the device plugin's `nvidia.com/gpu` is absent; a node runs one or the other)."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    whole = [d for d in devices if d.attribute("type") in (None, "gpu")]
    if not whole or GPU_RESOURCE in allocatable:
        return node
    status = dict(node.get("status") or {})
    status["allocatable"] = {**allocatable, GPU_RESOURCE: str(len(whole))}
    return {**node, "status": status}


class ClaimBook:
    """The cluster's DRA objects and the claim writes of a bind."""

    def __init__(
        self,
        api: KubeApi,
        *,
        interval_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.resource = client.ResourceV1Api(api.api_client)
        self.timeout_s = api.timeout_s
        self.slices = PeriodicList(
            "resource.k8s.io/v1/resourceslices",
            self.resource.list_resource_slice,
            interval_s=interval_s,
            monotonic=monotonic,
        )
        self.classes = PeriodicList(
            "resource.k8s.io/v1/deviceclasses",
            self.resource.list_device_class,
            interval_s=interval_s,
            monotonic=monotonic,
        )
        self.claims = PeriodicList(
            "resource.k8s.io/v1/resourceclaims",
            self.resource.list_resource_claim_for_all_namespaces,
            interval_s=interval_s,
            monotonic=monotonic,
        )
        self.view = SliceView({})
        self.warnings: tuple[str, ...] = ()

    def refresh(self) -> bool:
        """List what is due; True when the devices changed (the nodes are then read again)."""
        changed = self.slices.refresh()
        self.classes.refresh()
        self.claims.refresh()
        if changed:
            try:
                self.view = devices_by_node(self.slices.items.values())
            except DraError as exc:  # the last good devices stay
                logger.warning("ResourceSlices not used: %s", exc)
                return False
            self.warnings = self.view.warnings
        return changed

    def devices(self, node: str) -> Sequence[Any]:
        return self.view.devices.get(node, ())

    def device_map(self, spec: NodeSpec) -> DeviceMap:
        return map_devices(self.devices(spec.name), spec.gpus)

    def _classes(self) -> dict[str, DeviceClass]:
        found = {}
        for doc in self.classes.items.values():
            try:
                found[device_class(doc).name] = device_class(doc)
            except DraError as exc:
                logger.warning("%s", exc)
        return found

    # --- what a pod asks ------------------------------------------------------------------------

    def ask_of(self, info: PodInfo, pod: Mapping[str, Any]) -> PodInfo:
        """The pod with its claims' GPUs in its ask; its `error` says what cannot be honoured.
        ClaimsPending when a claim does not exist yet."""
        if info.ask is None or not (pod.get("spec") or {}).get("resourceClaims"):
            return info
        try:
            ask = self._ask(info, pod, info.ask)
        except DraError as exc:
            return replace(info, ask=None, error=str(exc))
        except ApiException as exc:  # the claim could not be read now: tried again next sync
            raise ClaimsPending(f"ResourceClaim not readable now: {exc.status}") from exc
        return replace(info, ask=ask)

    def _ask(self, info: PodInfo, pod: Mapping[str, Any], template: PodTemplate) -> PodTemplate:
        classes = self._classes()
        gpus, models, scopes = 0, set(template.gpu_models), []
        pinned: set[str] = set()
        for ref in claim_refs(pod):
            doc = self.claim(ref)
            if doc is None:
                raise ClaimsPending(f'resourceclaim "{ref.name}" not found')
            status = doc.get("status") or {}
            others = [r for r in status.get("reservedFor") or [] if r.get("uid") != info.uid]
            if others:
                raise DraError(
                    f"ResourceClaim {ref} is reserved for pod {others[0].get('name')}: "
                    "a claim shared by several pods is not supported"
                )
            ask = claim_ask(doc, classes)
            for request in ask.requests:
                if request.count is None:
                    raise DraError(
                        f"ResourceClaim {ref}: request {request.name}: allocationMode All is "
                        "not supported (its count depends on the node)"
                    )
                for selector in request.selectors:
                    if selector.what in PER_GPU_ATTRIBUTES:
                        raise DraError(
                            f"ResourceClaim {ref}: request {request.name}: selector "
                            f"{selector.source!r} picks among a node's GPUs, which gpusched "
                            "chooses by topology; select by model, type or memory instead"
                        )
            allocation = status.get("allocation")
            if allocation:
                pinned.add(_allocated_node(ref, allocation))
                gpus += len((allocation.get("devices") or {}).get("results") or [])
            else:
                gpus += sum(r.count or 0 for r in ask.requests)
            models |= {gfd_model(m) for m in ask.models}
            if ask.scope is not None:
                scopes.append(ask.scope)
        if gpus and template.resources.gpus:
            raise DraError(
                "the pod asks for GPUs through nvidia.com/gpu and through ResourceClaims; "
                "use one or the other"
            )
        if len(pinned) > 1:
            raise DraError(f"the pod's claims are allocated on different nodes: {sorted(pinned)}")
        if not gpus:
            return template
        node_selector = dict(template.node_selector)
        if pinned:
            node_selector[HOSTNAME_LABEL] = next(iter(pinned))
        scope = template.topology_scope
        policy = template.topology_policy
        if scopes:  # the tightest scope asked holds for all the pod's GPUs
            scope = TopologyScope.PCIE if TopologyScope.PCIE in scopes else TopologyScope.NUMA
            policy = TopologyPolicy.RESTRICTED
        return replace(
            template,
            resources=replace(template.resources, gpus=gpus),
            gpu_models=tuple(sorted(models)),
            topology_policy=policy,
            topology_scope=scope,
            node_selector=node_selector,
        )

    def claim(self, ref: ClaimRef) -> Obj | None:
        """The claim as listed, else as read now (a claim made since the last list)."""
        listed = self.claims.items.get(str(ref))
        return listed if listed is not None else self._read(ref)

    def held_gpus(self, pod: Mapping[str, Any], spec: NodeSpec) -> list[int] | None:
        """The GPU indices a bound pod's allocated claims hold on its node (pods bound by
        someone else are counted on them); None when it holds none through claims."""
        try:
            refs = claim_refs(pod)
        except ClaimsPending:
            return None
        device_map = self.device_map(spec)
        found: list[int] = []
        for ref in refs:
            doc = self.claim(ref) or {}
            for key in _result_keys(doc):
                index = device_map.index_of(key)
                if index is not None:
                    found.append(index)
        return sorted(found) or None

    # --- binding --------------------------------------------------------------------------------

    def reserve(
        self, pod: Mapping[str, Any], spec: NodeSpec, gpu_indices: Sequence[int]
    ) -> ReserveOutcome:
        """Allocate the placement's GPUs to the pod's claims and reserve them for it, before its
        Binding. A pod without claims needs nothing."""
        if not (pod.get("spec") or {}).get("resourceClaims"):
            return ReserveOutcome(True, gpu_indices=tuple(gpu_indices))
        meta = pod.get("metadata") or {}
        pod_name, pod_uid = str(meta.get("name") or ""), str(meta.get("uid") or "")
        written: list[ClaimRef] = []
        try:
            refs = claim_refs(pod)
            outcome = self._reserve(refs, pod_name, pod_uid, spec, list(gpu_indices), written)
        except (ClaimsPending, DraError) as exc:
            outcome = ReserveOutcome(False, 422, str(exc))
        except ApiException as exc:  # a claim could not be read: the pod is tried again
            outcome = ReserveOutcome(False, int(exc.status or 0), f"ResourceClaim: {exc.reason}")
        if not outcome.ok:
            self.take_back(written, pod_uid)
            return outcome
        return replace(outcome, written=tuple(written))

    def take_back(self, refs: Sequence[ClaimRef], pod_uid: str) -> None:
        """Undo an attempt's claim writes (its Binding was refused): kube-scheduler's Unreserve."""
        for ref in refs:
            self._take_back(ref, pod_uid)

    def _reserve(
        self,
        refs: Sequence[ClaimRef],
        pod_name: str,
        pod_uid: str,
        spec: NodeSpec,
        left: list[int],
        written: list[ClaimRef],
    ) -> ReserveOutcome:
        classes = self._classes()
        device_map = self.device_map(spec)
        mine = {str(ref) for ref in refs}
        held = allocated_keys(c for key, c in self.claims.items.items() if key not in mine)
        holding: list[int] = []
        for ref in refs:
            doc = self._read(ref)
            if doc is None:
                return ReserveOutcome(False, 404, f'resourceclaim "{ref.name}" not found')
            status = doc.get("status") or {}
            if status.get("allocation"):
                node = _allocated_node(ref, status["allocation"])
                if node != spec.name:
                    return ReserveOutcome(
                        False, 409, f"ResourceClaim {ref} is allocated on node {node}"
                    )
                keys = _result_keys(doc)
                holding += [i for k in keys if (i := device_map.index_of(k)) is not None]
                if any(r.get("uid") == pod_uid for r in status.get("reservedFor") or []):
                    continue
                consumers = [*status.get("reservedFor", []), reserved_for(pod_name, pod_uid)]
                new_status = {**status, "reservedFor": consumers}
            else:
                ask = claim_ask(doc, classes)
                eligible = ask.eligible(device_map)
                wanted = ask.gpus(device_map)
                take = [g for g in left if eligible >> g & 1][:wanted]
                new_status = allocation_status(
                    doc, ask, spec.name, take, device_map, pod_name=pod_name, pod_uid=pod_uid
                )
                taken = allocated_keys([{"status": new_status}]) & held
                if taken:
                    driver, pool, device = sorted(taken)[0]
                    return ReserveOutcome(
                        False, 409, f"device {driver}/{pool}/{device} is allocated to another claim"
                    )
                left = [g for g in left if g not in take]
                holding += take
            error = self._write(ref, doc, new_status)
            if error is not None:
                return error
            written.append(ref)
        return ReserveOutcome(True, gpu_indices=tuple(sorted(holding)))

    def _write(self, ref: ClaimRef, doc: Obj, status: Obj) -> ReserveOutcome | None:
        """The finalizer, then the status; None when both are written."""
        meta = dict(doc.get("metadata") or {})
        try:
            if FINALIZER not in (meta.get("finalizers") or []):
                meta["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
                doc = self._call(
                    self.resource.replace_namespaced_resource_claim, ref, {**doc, "metadata": meta}
                )
            self._call(
                self.resource.replace_namespaced_resource_claim_status,
                ref,
                {**doc, "status": status},
            )
        except ApiException as exc:
            return ReserveOutcome(False, int(exc.status or 0), _message(exc, ref))
        self.claims.items[str(ref)] = {**doc, "status": status}  # until the next list
        return None

    def _take_back(self, ref: ClaimRef, pod_uid: str) -> None:
        """The pod out of the claim's reservedFor, and its allocation gone with the last
        consumer. What cannot be undone
        now stays reserved for a pod that is not bound; the pod's next attempt reuses it."""
        try:
            doc = self._read(ref)
        except ApiException as exc:
            logger.warning("ResourceClaim %s not taken back: %s", ref, exc.status)
            return
        if doc is None:
            return
        status = dict(doc.get("status") or {})
        left = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod_uid]
        if left:
            status["reservedFor"] = left
        else:
            status.pop("reservedFor", None)
            status.pop("allocation", None)
        try:
            self._call(
                self.resource.replace_namespaced_resource_claim_status,
                ref,
                {**doc, "status": status},
            )
        except ApiException as exc:
            logger.warning("ResourceClaim %s not taken back: %s", ref, _message(exc, ref))
        self.claims.items.pop(str(ref), None)

    def _read(self, ref: ClaimRef) -> Obj | None:
        try:
            response: Any = self.resource.read_namespaced_resource_claim(
                ref.name, ref.namespace, _preload_content=False, _request_timeout=self.timeout_s
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        doc: Obj = json.loads(response.data)
        return doc

    def _call(self, method: Any, ref: ClaimRef, body: Obj) -> Obj:
        response: Any = method(
            ref.name, ref.namespace, body, _preload_content=False, _request_timeout=self.timeout_s
        )
        doc: Obj = json.loads(response.data)
        return doc


def _allocated_node(ref: ClaimRef, allocation: Mapping[str, Any]) -> str:
    """The node of an allocation of node-local devices (its node selector's metadata.name)."""
    terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        for field in term.get("matchFields") or []:
            values = field.get("values") or []
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and values:
                return str(values[0])
    raise DraError(f"ResourceClaim {ref}: allocated without a node gpusched can read")


def _result_keys(doc: Mapping[str, Any]) -> list[DeviceKey]:
    allocation = (doc.get("status") or {}).get("allocation") or {}
    return [
        (str(r.get("driver")), str(r.get("pool")), str(r.get("device")))
        for r in (allocation.get("devices") or {}).get("results") or []
    ]


def _message(exc: ApiException, ref: ClaimRef) -> str:
    try:
        doc = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        doc = {}
    text = doc.get("message") if isinstance(doc, dict) else None
    return f"ResourceClaim {ref}: {text or exc.reason or exc.status}"
