"""Server-side printing for kubectl: what a request asking `as=Table` (kubectl get) or
`as=PartialObjectMetadata[List]` gets, in meta.k8s.io/v1.

The columns and cells are those of the API server's printers (kubernetes/kubernetes
pkg/printers/internalversion/printers.go, `AddHandlers`), generated wide as the server does
(kubectl hides the columns of priority 1 unless `-o wide`): pods, nodes, namespaces, events
(both versions, printed from the core/v1 shape), jobs, configmaps; every other kind gets Name and
Age. Ages and durations are apimachinery's `duration.HumanDuration` of the server's clock. Each
row carries the object's metadata (`includeObject=Metadata`, the default), the whole object
(`Object`) or nothing (`None`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sim.kubernetes.kinds.events import to_core
from sim.kubernetes.meta import parse_time
from sim.kubernetes.resources import Resource

Obj = dict[str, Any]
META = "meta.k8s.io/v1"
Printer = Callable[[Obj, datetime], list[Any]]


def human_duration(seconds: float) -> str:
    """apimachinery's pkg/util/duration.HumanDuration."""
    whole = int(seconds)
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        return f"{minutes}m" if whole % 60 == 0 else f"{minutes}m{whole % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        days = (hours // 24) % 365
        return f"{hours // 24 // 365}y" if days == 0 else f"{hours // 24 // 365}y{days}d"
    return f"{hours // 24 // 365}y"


def since(stamp: object, now: datetime) -> str:
    if not stamp:
        return "<unknown>"
    return human_duration((now - parse_time(str(stamp))).total_seconds())


def _age(obj: Obj, now: datetime) -> str:
    return since(obj["metadata"].get("creationTimestamp"), now)


def _column(name: str, description: str, *, kind: str = "string", priority: int = 0) -> Obj:
    return {
        "name": name,
        "type": kind,
        "format": "name" if name == "Name" else "",
        "description": description,
        "priority": priority,
    }


NAME = _column("Name", "Name must be unique within a namespace.")
AGE = _column("Age", "CreationTimestamp is a timestamp representing the server time when this "
              "object was created.")  # fmt: skip


def _condition(conditions: list[Obj] | None, kind: str) -> bool:
    found = next((c for c in conditions or [] if c.get("type") == kind), None)
    return found is not None and found.get("status") == "True"


# --- pods -------------------------------------------------------------------------------------

POD_COLUMNS = [
    NAME,
    _column("Ready", "The aggregate readiness state of this pod for accepting traffic."),
    _column("Status", "The aggregate status of the containers in this pod."),
    _column("Restarts", "The number of times the containers in this pod have been restarted."),
    AGE,
    _column("IP", "IP address allocated to the pod.", priority=1),
    _column("Node", "NodeName is the node the pod is bound to.", priority=1),
    _column("Nominated Node", "The node the scheduler nominated for the pod.", priority=1),
    _column("Readiness Gates", "Readiness gates of the pod.", priority=1),
]


def _pod(pod: Obj, now: datetime) -> list[Any]:
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or ""
    if any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
        for c in status.get("conditions") or []
    ):
        reason = "SchedulingGated"
    ready, restarts, running = 0, 0, False
    for container in reversed(status.get("containerStatuses") or []):
        restarts += int(container.get("restartCount") or 0)
        state = container.get("state") or {}
        waiting, terminated = state.get("waiting") or {}, state.get("terminated")
        if waiting.get("reason"):
            reason = waiting["reason"]
        elif terminated is not None and terminated.get("reason"):
            reason = terminated["reason"]
        elif terminated is not None:
            code, signal = terminated.get("exitCode", 0), terminated.get("signal", 0)
            reason = f"Signal:{signal}" if signal else f"ExitCode:{code}"
        elif container.get("ready") and "running" in state:
            running = True
            ready += 1
    if reason == "Completed" and running:
        reason = "Running" if _condition(status.get("conditions"), "Ready") else "NotReady"
    phase = status.get("phase")
    if pod["metadata"].get("deletionTimestamp"):
        if status.get("reason") == "NodeLost":
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"
    ips = status.get("podIPs") or []
    gates = spec.get("readinessGates") or []
    gated = "<none>"
    if gates:
        met = sum(_condition(status.get("conditions"), g.get("conditionType")) for g in gates)
        gated = f"{met}/{len(gates)}"
    return [
        pod["metadata"]["name"],
        f"{ready}/{len(spec.get('containers') or [])}",
        reason,
        str(restarts),
        _age(pod, now),
        (ips[0].get("ip") if ips else "") or "<none>",
        spec.get("nodeName") or "<none>",
        status.get("nominatedNodeName") or "<none>",
        gated,
    ]


def _pod_conditions(pod: Obj) -> list[Obj]:
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        return []
    message = "The pod has completed successfully." if phase == "Succeeded" else "The pod failed."
    return [{"type": "Completed", "status": "True", "reason": phase, "message": message}]


# --- nodes, namespaces, configmaps ------------------------------------------------------------

NODE_COLUMNS = [
    NAME,
    _column("Status", "The status of the node"),
    _column("Roles", "The roles of the node"),
    AGE,
    _column("Version", "Kubelet Version reported by the node."),
    _column("Internal-IP", "List of addresses reachable to the node.", priority=1),
    _column("External-IP", "List of addresses reachable to the node.", priority=1),
    _column("OS-Image", "OS Image reported by the node.", priority=1),
    _column("Kernel-Version", "Kernel Version reported by the node.", priority=1),
    _column("Container-Runtime", "ContainerRuntime Version reported by the node.", priority=1),
]


def _node(node: Obj, now: datetime) -> list[Any]:
    status = node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    states = [] if ready is None else ["Ready" if ready.get("status") == "True" else "NotReady"]
    states = states or ["Unknown"]
    if (node.get("spec") or {}).get("unschedulable"):
        states.append("SchedulingDisabled")
    roles = set()
    for key, value in (node["metadata"].get("labels") or {}).items():
        if key.startswith("node-role.kubernetes.io/") and key != "node-role.kubernetes.io/":
            roles.add(key.removeprefix("node-role.kubernetes.io/"))
        elif key == "kubernetes.io/role" and value:
            roles.add(value)
    info = status.get("nodeInfo") or {}
    addresses = status.get("addresses") or []

    def address(kind: str) -> str:
        return next((a["address"] for a in addresses if a.get("type") == kind), "<none>")

    return [
        node["metadata"]["name"],
        ",".join(states),
        ",".join(sorted(roles)) or "<none>",
        _age(node, now),
        info.get("kubeletVersion", ""),
        address("InternalIP"),
        address("ExternalIP"),
        info.get("osImage") or "<unknown>",
        info.get("kernelVersion") or "<unknown>",
        info.get("containerRuntimeVersion") or "<unknown>",
    ]


NAMESPACE_COLUMNS = [NAME, _column("Status", "The status of the namespace"), AGE]


def _namespace(space: Obj, now: datetime) -> list[Any]:
    phase = (space.get("status") or {}).get("phase", "")
    return [space["metadata"]["name"], phase, _age(space, now)]


CONFIGMAP_COLUMNS = [NAME, _column("Data", "Number of keys.", kind="integer"), AGE]


def _configmap(found: Obj, now: datetime) -> list[Any]:
    keys = len(found.get("data") or {}) + len(found.get("binaryData") or {})
    return [found["metadata"]["name"], keys, _age(found, now)]


# --- events -----------------------------------------------------------------------------------

EVENT_COLUMNS = [
    _column("Last Seen", "The time at which the most recent occurrence was recorded."),
    _column("Type", "Type of this event (Normal, Warning)."),
    _column("Reason", "This should be a short, machine understandable string."),
    _column("Object", "The object that this event is about."),
    _column("Subobject", "The field of the object the event is about.", priority=1),
    _column("Source", "The component reporting this event.", priority=1),
    _column("Message", "A human-readable description of the status of this operation."),
    _column("First Seen", "The time at which the event was first recorded.", priority=1),
    _column("Count", "The number of times this event has occurred.", priority=1),
    {**NAME, "priority": 1},
]


def _event(event: Obj, now: datetime) -> list[Any]:
    core = event if event.get("apiVersion") == "v1" else to_core(event)
    first = since(core.get("firstTimestamp") or core.get("eventTime"), now)
    last = since(core["lastTimestamp"], now) if core.get("lastTimestamp") else first
    count = int(core.get("count") or 0) or 1  # singleton events have no count in the new API
    series = core.get("series")
    if series:
        last, count = since(series.get("lastObservedTime"), now), int(series.get("count") or 0)
    involved = core.get("involvedObject") or {}
    kind = str(involved.get("kind", "")).lower()
    target = f"{kind}/{involved['name']}" if involved.get("name") else kind
    source = core.get("source") or {}
    component = source.get("component") or core.get("reportingComponent") or ""
    host = source.get("host") or core.get("reportingInstance") or ""
    return [
        last,
        core.get("type", ""),
        core.get("reason", ""),
        target,
        involved.get("fieldPath", ""),
        f"{component}, {host}" if host else component,
        str(core.get("message", "")).strip(),
        first,
        count,
        core["metadata"]["name"],
    ]


# --- jobs -------------------------------------------------------------------------------------

JOB_COLUMNS = [
    NAME,
    _column("Status", "Status of the job."),
    _column("Completions", "The number of pods which reached phase Succeeded."),
    _column("Duration", "Time required to complete the job."),
    AGE,
    _column("Containers", "Names of each container in the template.", priority=1),
    _column("Images", "Images referenced by each container in the template.", priority=1),
    _column("Selector", "A label query over pods that should match the pod count.", priority=1),
]


def _job(job: Obj, now: datetime) -> list[Any]:
    spec, status = job.get("spec") or {}, job.get("status") or {}
    succeeded = int(status.get("succeeded") or 0)
    if spec.get("completions") is not None:
        completions = f"{succeeded}/{spec['completions']}"
    elif int(spec.get("parallelism") or 0) > 1:
        completions = f"{succeeded}/1 of {spec['parallelism']}"
    else:
        completions = f"{succeeded}/1"
    duration = ""
    if status.get("startTime"):
        end = parse_time(status["completionTime"]) if status.get("completionTime") else now
        duration = human_duration((end - parse_time(status["startTime"])).total_seconds())
    conditions = status.get("conditions")
    if _condition(conditions, "Complete"):
        state = "Complete"
    elif _condition(conditions, "Failed"):
        state = "Failed"
    elif job["metadata"].get("deletionTimestamp"):
        state = "Terminating"
    elif _condition(conditions, "Suspended"):
        state = "Suspended"
    elif _condition(conditions, "FailureTarget"):
        state = "FailureTarget"
    else:
        state = "Running"
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return [
        job["metadata"]["name"],
        state,
        completions,
        duration,
        _age(job, now),
        ",".join(str(c.get("name", "")) for c in containers),
        ",".join(str(c.get("image", "")) for c in containers),
        format_selector(spec.get("selector")),
    ]


def format_selector(selector: Obj | None) -> str:
    """metav1.FormatLabelSelector."""
    if selector is None:
        return "<none>"
    terms = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        key, op = expression.get("key", ""), expression.get("operator", "")
        values = ",".join(expression.get("values") or [])
        terms.append(
            {"In": f"{key} in ({values})", "NotIn": f"{key} notin ({values})",
             "Exists": key, "DoesNotExist": f"!{key}"}.get(op, f"{key} {op}")
        )  # fmt: skip
    return ",".join(terms) or "<none>"


PRINTERS: dict[str, tuple[list[Obj], Printer]] = {
    "/pods": (POD_COLUMNS, _pod),
    "/nodes": (NODE_COLUMNS, _node),
    "/namespaces": (NAMESPACE_COLUMNS, _namespace),
    "/configmaps": (CONFIGMAP_COLUMNS, _configmap),
    "/events": (EVENT_COLUMNS, _event),
    "events.k8s.io/events": (EVENT_COLUMNS, _event),
    "batch/jobs": (JOB_COLUMNS, _job),
}


def _default(obj: Obj, now: datetime) -> list[Any]:
    return [obj["metadata"]["name"], _age(obj, now)]


def partial(obj: Obj) -> Obj:
    return {"kind": "PartialObjectMetadata", "apiVersion": META, "metadata": obj["metadata"]}


def table(resource: Resource, items: list[Obj], now: datetime, meta: Obj, include: str) -> Obj:
    """A Table of `items` (in the served shape) with the list's metadata."""
    columns, printer = PRINTERS.get(resource.key, ([NAME, AGE], _default))
    rows = []
    for obj in items:
        row: Obj = {"cells": printer(obj, now)}
        if resource.key == "/pods" and (conditions := _pod_conditions(obj)):
            row["conditions"] = conditions
        if include != "None":
            row["object"] = obj if include == "Object" else partial(obj)
        rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": META,
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": rows,
    }


def partial_list(items: list[Obj], meta: Obj) -> Obj:
    return {
        "kind": "PartialObjectMetadataList",
        "apiVersion": META,
        "metadata": meta,
        "items": [partial(o) for o in items],
    }
