"""Kubelets for every node of the simulated Kubernetes, on an injectable clock: each `run_once()`
brings the pods bound to the nodes forward one step, so experiments on a simulated clock advance
API, kubelets and scheduler in lock-step (as sim/simulator.py does on the database side).

A step, on every node:
1. admits the pods newly bound to it as the kubelet does: a pod that does not fit what is left of
   the node's allocatable fails with the kubelet's reason (`OutOfcpu`, `OutOfnvidia.com/gpu`,
   ...; extended resources the node does not advertise are ignored, as the kubelet does);
2. gives it its devices (sim/kubernetes/devices.py) and starts it: phase Running, startTime, the
   conditions PodReadyToStartContainers, Initialized, ContainersReady and Ready, container
   statuses, pod IP. A pod whose ResourceClaims are not allocated and reserved for it waits,
   with one `FailedPrepareDynamicResources` Warning event;
3. charges contention: holders of one GPU that want more than the whole GPU all lose time;
4. finishes pods whose run is over: phase Succeeded, containers terminated with exit code 0;
5. stops pods being deleted once their grace period is over: a running pod is reported Failed
   (its containers killed, exit code 137), then removed from the store with a grace-0 delete.

What a pod does comes from its annotations:

    sim.gpusched.io/duration-seconds   run time in simulated seconds; without it the pod runs
                                       until deleted
    sim.gpusched.io/utilization        JSON utilization profile, keys as in sim/specs/*.yaml:
                                       {"kind": "diurnal", "mean": 0.5, "periodSeconds": 86400}
A malformed value gets an `InvalidSimulationAnnotation` Warning event and is ignored.

Node changes for tests: `set_gpu_health`, `remove_gpu`, `add_gpus` (the NVIDIA device plugin's
view: allocatable `nvidia.com/gpu` counts the healthy GPUs, capacity the present ones; with DRA
the node's ResourceSlice lists the healthy GPUs) and `set_cpu`.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction
from typing import Any

from kubernetes.utils import parse_quantity

from sim.gpu_states import Holder, demand, lost_seconds
from sim.kubernetes import errors, podstatus
from sim.kubernetes.cluster import NodeDevices
from sim.kubernetes.devices import Holding, NodeGpus, Unavailable, Waiting
from sim.kubernetes.meta import micro_time, parse_time
from sim.kubernetes.pod_spec import effective_requests
from sim.kubernetes.registry import Registry
from sim.kubernetes.resources import core, named
from sim.kubernetes.store import DELETED
from sim.utilization import SPEC_KEYS, ProfileError, UtilizationProfile

Obj = dict[str, Any]
DURATION = "sim.gpusched.io/duration-seconds"
UTILIZATION = "sim.gpusched.io/utilization"
PODS, NODES = core("pods"), core("nodes")
EVENTS = named("events.k8s.io/events")
INVALID_ANNOTATION = "InvalidSimulationAnnotation"  # the Warning for a malformed annotation
SLICES = named("resource.k8s.io/resourceslices")
TERMINAL = ("Succeeded", "Failed")
FIT_ORDER = ("cpu", "memory", "ephemeral-storage")
KILLED_EXIT_CODE = 137  # SIGKILL once the grace period is over


@dataclass
class PodRun:
    key: str
    uid: str
    node: str
    containers: tuple[str, ...]
    started: datetime
    requests: dict[str, Fraction]
    holding: Holding
    duration_s: float | None = None
    profile: UtilizationProfile = field(default_factory=UtilizationProfile)
    lost_s: float = 0.0

    def done(self, now: datetime) -> bool:
        if self.duration_s is None:
            return False
        return (now - self.started).total_seconds() >= self.duration_s + self.lost_s

    def busy(self, now: datetime) -> float:
        return self.profile.at((now - self.started).total_seconds())


@dataclass
class KubeletReport:
    started: int = 0
    rejected: int = 0
    waiting: int = 0
    slowed: int = 0
    finished: int = 0
    terminated: int = 0


class Kubelets:
    def __init__(
        self,
        registry: Registry,
        *,
        clock: Callable[[], datetime] | None = None,
        devices: Mapping[str, NodeDevices] | None = None,
        honour_gpu_ids: bool = False,
        nodes: Collection[str] | None = None,
    ) -> None:
        self.registry = registry
        self.clock = clock or registry.clock
        self.honour_gpu_ids = honour_gpu_ids
        self.only = set(nodes) if nodes is not None else None
        self.xid: dict[tuple[str, int], int] = {}  # (node, gpu) -> last XID error
        self._inventory = dict(devices or {})
        self._gpus: dict[str, NodeGpus] = {}
        self._runs: dict[str, PodRun] = {}
        self._on_node: dict[str, dict[str, PodRun]] = {}  # node -> key -> run
        self._pending: set[str] = set()
        self._terminating: set[str] = set()
        self._done: dict[str, str] = {}  # key -> uid of pods that finished or were rejected here
        self._warned: set[tuple[str, str]] = set()
        self._cursor: int | None = None
        self._last_tick: datetime | None = None
        self._ips: dict[str, int] = {}

    # --- the step -------------------------------------------------------------------------

    def run_once(self) -> KubeletReport:
        now = self.clock()
        report = KubeletReport()
        with self.registry.lock:
            self._sync()
            # The interval that just ended was shared by the pods that ran in it: one starting
            # now neither lost time in it nor took any from the others.
            self._charge_contention(now, report)
            for key in sorted(self._pending):
                self._try_start(key, now, report)
            for run in list(self._runs.values()):
                if run.done(now):
                    self._finish(run, now)
                    report.finished += 1
            for key in sorted(self._terminating):
                report.terminated += self._stop_if_due(key, now)
        self._last_tick = now
        return report

    def _sync(self) -> None:
        storage = self.registry.storage
        if self._cursor is not None:
            try:
                changes = storage.changes_since(PODS, self._cursor)
            except errors.ApiError:  # compacted: look at everything again
                self._cursor = None
            else:
                for change in changes:
                    if change.type == DELETED:
                        self._forget(_key(change.obj))
                    else:
                        self._observe(change.obj)
        if self._cursor is None:
            present = {_key(p) for p in storage.items(PODS)}
            for key in [k for k in self._runs if k not in present]:
                self._forget(key)
            for pod in storage.items(PODS):
                self._observe(pod)
        self._cursor = storage.revision

    def _observe(self, pod: Obj) -> None:
        key, meta = _key(pod), pod["metadata"]
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node or not self._manages(node):
            return
        uid = str(meta.get("uid"))
        run = self._runs.get(key)
        if run is not None and run.uid != uid:
            self._forget(key)  # deleted and created again under the same name
        if self._done.get(key) not in (None, uid):
            del self._done[key]
        if meta.get("deletionTimestamp"):
            self._terminating.add(key)
        phase = (pod.get("status") or {}).get("phase")
        if phase in TERMINAL:
            self._pending.discard(key)
            if key in self._runs:  # ended by someone else: it holds nothing any more
                self._release(key)
            return
        if key not in self._runs and key not in self._done and not meta.get("deletionTimestamp"):
            self._pending.add(key)

    def _manages(self, node: str) -> bool:
        if self.only is not None and node not in self.only:
            return False
        return self.registry.storage.get(NODES, "", node) is not None

    def _forget(self, key: str) -> None:
        self._release(key)
        self._pending.discard(key)
        self._terminating.discard(key)
        self._done.pop(key, None)

    def _release(self, key: str) -> None:
        run = self._runs.pop(key, None)
        if run is not None:
            self._on_node[run.node].pop(key, None)
            self._node_gpus(run.node).held.pop(key, None)

    # --- start ----------------------------------------------------------------------------

    def _try_start(self, key: str, now: datetime, report: KubeletReport) -> None:
        pod = self.registry.storage.get(PODS, *_split(key))
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            self._pending.discard(key)
            return
        spec = pod.get("spec") or {}
        node = self.registry.storage.get(NODES, "", str(spec.get("nodeName")))
        if node is None:
            return  # bound to a node that is not there: it waits, as it would for a kubelet
        requests = effective_requests(spec)
        refusal = self._admit(node, requests)
        if refusal is None:
            try:
                holding = self._node_gpus(node["metadata"]["name"]).assign(
                    self.registry, pod, _counts(requests), honour_ids=self.honour_gpu_ids
                )
            except Waiting as exc:
                self._warn(pod, "FailedPrepareDynamicResources", str(exc), now)
                report.waiting += 1
                return
            except Unavailable as exc:
                refusal = ("UnexpectedAdmissionError", str(exc))
        self._pending.discard(key)
        if refusal is not None:
            reason, message = refusal
            self._write_status(pod, podstatus.rejected(pod, reason, message))
            self._done[key] = str(pod["metadata"].get("uid"))
            report.rejected += 1
            return
        run = PodRun(
            key=key,
            uid=str(pod["metadata"].get("uid")),
            node=node["metadata"]["name"],
            containers=tuple(str(c.get("name")) for c in spec.get("containers") or []),
            started=now,
            requests=requests,
            holding=holding,
        )
        self._read_annotations(pod, run, now)
        self._runs[key] = run
        self._on_node.setdefault(run.node, {})[key] = run
        self._node_gpus(run.node).held[key] = holding
        self._write_status(
            pod, podstatus.running(pod, now, host_ip=_host_ip(node), pod_ip=self._pod_ip(node))
        )
        report.started += 1

    def _admit(self, node: Obj, requests: dict[str, Fraction]) -> tuple[str, str] | None:
        """The kubelet's resource fit: the first resource that does not fit, as its reason."""
        name = node["metadata"]["name"]
        allocatable = (node.get("status") or {}).get("allocatable") or {}
        runs = list(self._on_node.get(name, {}).values())
        pods_cap = int(parse_quantity(allocatable.get("pods", "110")))
        if len(runs) + 1 > pods_cap:
            return "OutOfpods", podstatus.insufficient("pods", 1, len(runs), pods_cap)
        extended = sorted(r for r in requests if r not in FIT_ORDER)
        for resource in (*FIT_ORDER, *extended):
            asked = requests.get(resource, Fraction(0))
            if asked <= 0 or (resource not in FIT_ORDER and resource not in allocatable):
                continue  # an extended resource the node does not advertise is not the kubelet's
            capacity = Fraction(parse_quantity(allocatable.get(resource, "0")))
            used = sum((r.requests.get(resource, Fraction(0)) for r in runs), Fraction(0))
            if used + asked > capacity:
                scale = 1000 if resource == "cpu" else 1
                return f"OutOf{resource}", podstatus.insufficient(
                    resource,
                    math.ceil(asked * scale),
                    math.ceil(used * scale),
                    math.floor(capacity * scale),
                )
        return None

    def _read_annotations(self, pod: Obj, run: PodRun, now: datetime) -> None:
        annotations = pod["metadata"].get("annotations") or {}
        if DURATION in annotations:
            try:
                run.duration_s = float(annotations[DURATION])
                if not math.isfinite(run.duration_s) or run.duration_s < 0:
                    raise ValueError("must be a non-negative number of seconds")
            except ValueError as exc:
                run.duration_s = None
                self._warn(pod, INVALID_ANNOTATION, f"{DURATION}: {exc}", now)
        if UTILIZATION in annotations:
            try:
                run.profile = profile_from_annotation(annotations[UTILIZATION])
            except ValueError as exc:
                self._warn(pod, INVALID_ANNOTATION, f"{UTILIZATION}: {exc}", now)

    def _pod_ip(self, node: Obj) -> str:
        name = node["metadata"]["name"]
        cidr = str((node.get("spec") or {}).get("podCIDR") or "10.244.0.0/24")
        self._ips[name] = self._ips.get(name, 1) % 250 + 1
        return f"{cidr.rsplit('.', 1)[0]}.{self._ips[name] + 1}"

    # --- progress, finish, stop -----------------------------------------------------------

    def _charge_contention(self, now: datetime, report: KubeletReport) -> None:
        if self._last_tick is None:
            return
        elapsed = (now - self._last_tick).total_seconds()
        if elapsed <= 0:
            return
        lost: dict[str, float] = {}
        for node in [n for n, runs in self._on_node.items() if runs]:
            for holders in self.holders_by_gpu(node, now).values():
                if len(holders) < 2:
                    continue  # one holder never wants more than the whole GPU
                share = lost_seconds(demand([h for h, _ in holders]), elapsed)
                for _, run in holders:
                    if share > lost.get(run.key, 0.0):
                        lost[run.key] = share
        for key, seconds in lost.items():
            self._runs[key].lost_s += seconds
        report.slowed = len(lost)

    def holders_by_gpu(self, node: str, now: datetime) -> dict[int, list[tuple[Holder, PodRun]]]:
        """Per whole (non-MIG) GPU of `node`, who holds it now and how busy they keep it."""
        found: dict[int, list[tuple[Holder, PodRun]]] = {}
        for run in self._on_node.get(node, {}).values():
            held = [(g, 1000) for g in run.holding.gpus] + list(run.holding.shares)
            for gpu, milli in held:
                found.setdefault(gpu, []).append((self.holder(run, now, milli), run))
        return found

    def holder(self, run: PodRun, now: datetime, milli: int = 1000) -> Holder:
        namespace, name = _split(run.key)
        return Holder(
            pod=name,
            namespace=namespace,
            uid=run.uid,
            busy=run.busy(now),
            memory=run.profile.memory,
            milli=milli,
            container=run.containers[0] if run.containers else "main",
        )

    def _finish(self, run: PodRun, now: datetime) -> None:
        pod = self.registry.storage.get(PODS, *_split(run.key))
        self._release(run.key)
        self._done[run.key] = run.uid
        if pod is not None:
            self._write_status(
                pod, podstatus.ended(pod, now, exit_code=0, reason="Completed", phase="Succeeded")
            )

    def _stop_if_due(self, key: str, now: datetime) -> int:
        pod = self.registry.storage.get(PODS, *_split(key))
        if pod is None:
            self._forget(key)
            return 0
        due = parse_time(str(pod["metadata"].get("deletionTimestamp")))
        if key in self._runs and now < due:
            return 0  # a pod that never started has nothing to stop
        if key in self._runs and (pod.get("status") or {}).get("phase") not in TERMINAL:
            pod = self._write_status(
                pod,
                podstatus.ended(
                    pod, now, exit_code=KILLED_EXIT_CODE, reason="Error", phase="Failed"
                ),
            )
        uid = pod["metadata"].get("uid")
        self._forget(key)
        namespace, name = _split(key)
        options = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        with contextlib.suppress(errors.ApiError):  # gone already, or a new pod of that name
            self.registry.delete(PODS, namespace, name, options)
        return 1

    def _write_status(self, pod: Obj, status: Obj) -> Obj:
        # The status subresource takes only `status` from what it is given: no copy of the rest.
        return self.registry.apply_update(
            PODS, pod, {**pod, "status": status}, subresource="status"
        )

    def _warn(self, pod: Obj, reason: str, note: str, now: datetime) -> None:
        meta = pod["metadata"]
        if (str(meta.get("uid")), reason) in self._warned:
            return
        self._warned.add((str(meta.get("uid")), reason))
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        event = {
            "metadata": {"generateName": f"{meta['name']}."},
            "eventTime": micro_time(now),
            "reportingController": "kubelet",
            "reportingInstance": node,
            "action": "StartPod",
            "reason": reason,
            "type": "Warning",
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "namespace": meta.get("namespace"),
                "uid": meta.get("uid"),
            },
            "note": note[:1024],
        }
        self.registry.create(EVENTS, str(meta.get("namespace") or ""), event)

    # --- what the nodes really do (tests, exporter) ---------------------------------------

    def _node_gpus(self, node: str) -> NodeGpus:
        found = self._gpus.get(node)
        if found is None:
            devices = self._inventory.get(node)
            if devices is None:
                obj = self.registry.storage.get(NODES, "", node)
                devices = NodeDevices.from_node(obj) if obj else NodeDevices(node, {})
                self._inventory[node] = devices
            found = self._gpus[node] = NodeGpus(devices)
        return found

    def devices(self, node: str) -> NodeDevices:
        return self._node_gpus(node).devices

    def assignments(self) -> dict[str, dict[str, tuple[int, ...]]]:
        """Node -> pod ("namespace/name") -> the GPU indices it really holds."""
        found: dict[str, dict[str, tuple[int, ...]]] = {}
        for run in self._runs.values():
            found.setdefault(run.node, {})[run.key] = run.holding.indices()
        return found

    def holdings(self, node: str) -> dict[str, Holding]:
        return dict(self._node_gpus(node).held)

    def running(self, node: str | None = None) -> list[PodRun]:
        if node is not None:
            return list(self._on_node.get(node, {}).values())
        return list(self._runs.values())


def profile_from_annotation(text: str) -> UtilizationProfile:
    """`sim.gpusched.io/utilization`: the spec's keys (kind, mean, jitter, periodSeconds, duty,
    memory, seed); ValueError naming what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise ValueError("must be a JSON object")
    unknown = sorted(set(doc) - set(SPEC_KEYS))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r}")
    try:
        return UtilizationProfile(**{SPEC_KEYS[k]: v for k, v in doc.items()})
    except (TypeError, ProfileError) as exc:
        raise ValueError(str(exc)) from exc


def _host_ip(node: Obj) -> str:
    addresses = (node.get("status") or {}).get("addresses") or []
    return next((a["address"] for a in addresses if a.get("type") == "InternalIP"), "10.0.0.1")


def _counts(requests: dict[str, Fraction]) -> dict[str, int]:
    return {k: int(v) for k, v in requests.items() if k.startswith(("nvidia.com/", "gpusched.io/"))}


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta.get('namespace')}/{meta['name']}"


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name
