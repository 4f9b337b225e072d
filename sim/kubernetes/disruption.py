"""PodDisruptionBudget status, as kube-controller-manager's disruption controller computes it
(pkg/controller/disruption/disruption.go), recomputed whenever a pod it selects or the budget
itself changes:

- expectedPods: the pods the selector matches (a null selector matches none, an empty one all
  pods of the namespace, as in policy/v1);
- desiredHealthy: minAvailable as an integer; minAvailable or maxUnavailable as a percentage of
  expectedPods, rounded up; expectedPods - maxUnavailable, at least 0;
- currentHealthy: matching pods that are Ready, not being deleted, and not listed in
  disruptedPods (an eviction the controller has not seen finish; entries drop when the pod is
  deleted or after two minutes);
- disruptionsAllowed: currentHealthy - desiredHealthy, 0 when negative or nothing is expected;
- the DisruptionAllowed condition (SufficientPods / InsufficientPods).

One simplification: the real controller takes expectedPods for percentages and maxUnavailable
from the scale of the pods' controllers (Deployments, StatefulSets, ... via /scale); here the
matching pods stand for that scale, which is the same for pods whose controllers are at their
desired size.
"""

from __future__ import annotations

import math
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from sim.kubernetes import selectors
from sim.kubernetes.meta import clone, parse_time, rfc3339
from sim.kubernetes.resources import core, named
from sim.kubernetes.store import DELETED, Change

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
DELETION_TIMEOUT = timedelta(minutes=2)
PDBS = named("policy/poddisruptionbudgets")
PODS = core("pods")


def selects(pdb: Obj, labels: dict[str, str]) -> bool:
    spec = pdb.get("spec") or {}
    if spec.get("selector") is None:
        return False
    try:
        return selectors.from_object(spec["selector"]).matches(labels)
    except ValueError:
        return False


def pdbs_for(api: Registry, pod: Obj) -> list[Obj]:
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    return [p for p in api.storage.items(PDBS, meta.get("namespace", "")) if selects(p, labels)]


def is_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def react(api: Registry, change: Change) -> None:
    """Recompute the budgets a pod change or a budget change concerns."""
    if change.resource is PODS:
        namespace = str(change.obj["metadata"].get("namespace") or "")
        labels = [change.obj["metadata"].get("labels") or {}]
        if change.previous is not None:
            labels.append(change.previous["metadata"].get("labels") or {})
        for pdb in api.storage.items(PDBS, namespace):
            if any(selects(pdb, found) for found in labels):
                refresh(api, pdb)
    elif change.resource is PDBS and change.type != DELETED:
        old_generation = (change.previous or {}).get("metadata", {}).get("generation")
        if change.previous is None or old_generation != change.obj["metadata"].get("generation"):
            refresh(api, change.obj)


def refresh(api: Registry, pdb: Obj) -> None:
    status = compute(api, pdb)
    if status != pdb.get("status"):
        updated = clone(pdb)
        updated["status"] = status
        api.write(PDBS, updated)


def compute(api: Registry, pdb: Obj) -> Obj:
    meta, spec = pdb["metadata"], pdb.get("spec") or {}
    now = api.now()
    pods = [
        p
        for p in api.storage.items(PODS, str(meta.get("namespace") or ""))
        if selects(pdb, p["metadata"].get("labels") or {})
    ]
    expected = len(pods)
    if "maxUnavailable" in spec:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
    elif isinstance(spec.get("minAvailable"), str):
        desired = _scaled(spec["minAvailable"], expected)
    else:
        desired = int(spec.get("minAvailable") or 0)
    by_name = {p["metadata"]["name"]: p for p in pods}
    old_status = pdb.get("status") or {}
    disrupted = {
        name: at
        for name, at in (old_status.get("disruptedPods") or {}).items()
        if name in by_name
        and not by_name[name]["metadata"].get("deletionTimestamp")
        and parse_time(at) + DELETION_TIMEOUT > now
    }
    healthy = sum(
        1
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and p["metadata"]["name"] not in disrupted
        and is_ready(p)
    )
    allowed = healthy - desired if expected > 0 and healthy > desired else 0
    status: Obj = {"observedGeneration": meta.get("generation", 1)}
    if disrupted:
        status["disruptedPods"] = disrupted
    status.update(
        disruptionsAllowed=allowed,
        currentHealthy=healthy,
        desiredHealthy=desired,
        expectedPods=expected,
        conditions=[condition(old_status, allowed > 0, meta.get("generation", 1), now)],
    )
    return status


def condition(old_status: Obj, allowed: bool, generation: int, now: Any) -> Obj:
    value = "True" if allowed else "False"
    old = next(
        (c for c in old_status.get("conditions") or [] if c.get("type") == "DisruptionAllowed"),
        None,
    )
    since = old["lastTransitionTime"] if old and old.get("status") == value else rfc3339(now)
    return {
        "type": "DisruptionAllowed",
        "status": value,
        "reason": "SufficientPods" if allowed else "InsufficientPods",
        "message": "",
        "observedGeneration": generation,
        "lastTransitionTime": since,
    }


def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp."""
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(int(value[:-1]) * total / 100)
    return int(value)
