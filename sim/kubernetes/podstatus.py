"""The pod statuses a kubelet reports: running (the conditions and container statuses of a
started pod), ended (Succeeded or Failed, containers terminated) and rejected at admission."""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Any

from sim.kubernetes.meta import clone, rfc3339

Obj = dict[str, Any]
STARTED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def running(pod: Obj, now: datetime, *, host_ip: str, pod_ip: str) -> Obj:
    status = clone(pod.get("status") or {})
    started = rfc3339(now)
    conditions = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
    for kind in STARTED_CONDITIONS:
        conditions.append(
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": started}
        )
    uid = str(pod["metadata"].get("uid"))
    containers = []
    for container in (pod.get("spec") or {}).get("containers") or []:
        image, name = str(container.get("image", "")), str(container.get("name"))
        containers.append(
            {
                "name": name,
                "image": image,
                "imageID": f"{image}@sha256:{_digest(image)}",
                "containerID": f"containerd://{_digest(uid + name)}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        )
    status.update(
        phase="Running",
        conditions=conditions,
        hostIP=host_ip,
        hostIPs=[{"ip": host_ip}],
        podIP=pod_ip,
        podIPs=[{"ip": pod_ip}],
        startTime=started,
        containerStatuses=containers,
    )
    return status


def set_condition(
    status: Obj, kind: str, now: datetime, *, reason: str = "", message: str = ""
) -> None:
    """Replace (or add) the True condition `kind` in `status`, a copy the caller owns."""
    condition: Obj = {"type": kind, "status": "True"}
    if reason:
        condition.update(reason=reason, message=message)
    condition.update(lastProbeTime=None, lastTransitionTime=rfc3339(now))
    kept = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    status["conditions"] = [*kept, condition]


def ended(pod: Obj, now: datetime, *, phase: str, exit_code: int, reason: str) -> Obj:
    status = clone(pod.get("status") or {})
    finished = rfc3339(now)
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Ready", "ContainersReady"):
            condition.update(
                status="False",
                reason="PodCompleted" if phase == "Succeeded" else "PodFailed",
                lastTransitionTime=finished,
            )
    for container in status.get("containerStatuses") or []:
        started = ((container.get("state") or {}).get("running") or {}).get("startedAt", finished)
        terminated = {
            "exitCode": exit_code,
            "reason": reason,
            "startedAt": started,
            "finishedAt": finished,
            "containerID": container.get("containerID"),
        }
        container.update(ready=False, started=False, state={"terminated": terminated})
    status["phase"] = phase
    return status


def rejected(pod: Obj, reason: str, message: str) -> Obj:
    status = clone(pod.get("status") or {})
    status.update(phase="Failed", reason=reason, message=f"Pod was rejected: {message}")
    return status


def insufficient(resource: str, requested: int, used: int, capacity: int) -> str:
    """The kubelet's InsufficientResourceError text."""
    return (
        f"Node didn't have enough resource: {resource}, requested: {requested}, used: {used}, "
        f"capacity: {capacity}"
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
