"""Server-side printing for kubectl: a list asked for `as=Table` (kubectl get) answers a
meta.k8s.io/v1 Table with the columns kubectl shows for the kind (Name, Age; pods add Status and
Node, nodes Status)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sim.kubernetes.meta import parse_time
from sim.kubernetes.resources import Resource

if TYPE_CHECKING:
    from sim.kubernetes.registry import Page

Obj = dict[str, Any]


def wanted(accept: str) -> bool:
    return "as=Table" in accept


def _column(name: str, description: str, format: str = "") -> Obj:
    return {
        "name": name,
        "type": "string",
        "format": format,
        "description": description,
        "priority": 0,
    }


def _age(obj: Obj, now: datetime) -> str:
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    seconds = max(0, int((now - parse_time(created)).total_seconds()))
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _cells(resource: Resource, obj: Obj, now: datetime) -> list[str]:
    name = obj["metadata"]["name"]
    if resource.key == "/pods":
        status = obj.get("status") or {}
        phase = (
            "Terminating" if obj["metadata"].get("deletionTimestamp") else status.get("phase", "")
        )
        return [name, phase, (obj.get("spec") or {}).get("nodeName", "<none>"), _age(obj, now)]
    if resource.key == "/nodes":
        conditions = (obj.get("status") or {}).get("conditions") or []
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
        return [name, "Ready" if ready else "NotReady", _age(obj, now)]
    return [name, _age(obj, now)]


def table(resource: Resource, page: Page, now: datetime) -> Obj:
    columns = [_column("Name", "Name of the object", "name")]
    if resource.key == "/pods":
        columns += [
            _column("Status", "The pod's phase"),
            _column("Node", "The node it is bound to"),
        ]
    elif resource.key == "/nodes":
        columns.append(_column("Status", "Whether the node is Ready"))
    columns.append(_column("Age", "Time since creation"))
    meta: Obj = {"resourceVersion": str(page.revision)}
    if page.continue_token:
        meta["continue"] = page.continue_token
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": columns,
        "rows": [{"cells": _cells(resource, obj, now), "object": obj} for obj in page.items],
    }
