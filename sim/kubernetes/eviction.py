"""pods/eviction (policy/v1 Eviction), as the API server's EvictionREST decides
(pkg/registry/core/pod/storage/eviction.go):

- a pod that is Pending, Succeeded, Failed or already terminating is deleted without looking at
  budgets;
- more than one PodDisruptionBudget selecting the pod: 500;
- a pod that is not Ready may go when the budget is already met (or its
  unhealthyPodEvictionPolicy is AlwaysAllow);
- otherwise the budget must allow a disruption: 429 TooManyRequests "Cannot evict pod as it
  would violate the pod's disruption budget." with a DisruptionBudget cause naming what the
  budget needs and has; when it allows one, disruptionsAllowed drops by one and the pod is
  listed in disruptedPods;
- the pod gets the DisruptionTarget condition (EvictionByEvictionAPI) and is deleted
  gracefully (deleteOptions honoured). 201 with a `Status`; 404 when the pod does not exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import disruption, errors, podstatus
from sim.kubernetes.meta import clone, rfc3339
from sim.kubernetes.resources import core, named

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
PODS = core("pods")
PDBS = named("policy/poddisruptionbudgets")
REFUSED = "Cannot evict pod as it would violate the pod's disruption budget."


def evict(api: Registry, namespace: str, name: str, body: Any) -> Obj:
    if not isinstance(body, dict) or body.get("kind", "Eviction") not in ("Eviction", None, ""):
        raise errors.bad_request(f"not a Eviction object: {type(body).__name__}")
    if (body.get("metadata") or {}).get("name", name) != name:
        raise errors.bad_request("name in URL does not match name in Eviction object")
    options = body.get("deleteOptions") or {}
    with api.lock:
        pod = api.read(PODS, namespace, name)
        phase = (pod.get("status") or {}).get("phase", "Pending")
        if phase in ("Pending", "Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
            api.delete(PODS, namespace, name, options)
            return errors.success(201)
        budgets = disruption.pdbs_for(api, pod)
        if len(budgets) > 1:
            raise errors.ApiError(
                500,
                "",
                "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                "does not support.",
            )
        if budgets:
            _take_disruption(api, budgets[0], pod)
        marked = clone(pod)
        status = marked.setdefault("status", {})
        podstatus.set_condition(
            status,
            "DisruptionTarget",
            api.now(),
            reason="EvictionByEvictionAPI",
            message="Eviction API: evicting",
        )
        api.storage.put(PODS, marked)
        api.delete(PODS, namespace, name, options)
    return errors.success(201)


def _take_disruption(api: Registry, pdb: Obj, pod: Obj) -> None:
    status = pdb.get("status") or {}
    healthy, desired = int(status.get("currentHealthy", 0)), int(status.get("desiredHealthy", 0))
    if not disruption.is_ready(pod):
        policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
        if policy == "AlwaysAllow" or (healthy >= desired and desired > 0):
            return
    pdb_name = pdb["metadata"]["name"]
    if int(status.get("observedGeneration", 0)) < int(pdb["metadata"].get("generation", 1)):
        raise errors.too_many_requests(
            REFUSED,
            [_cause(f"The disruption budget {pdb_name} is still being processed by the server.")],
            retry_after_s=10,
        )
    allowed = int(status.get("disruptionsAllowed", 0))
    if allowed < 0:
        raise errors.forbidden(PDBS, pdb_name, "pdb disruptions allowed is negative")
    if allowed == 0:
        raise errors.too_many_requests(
            REFUSED,
            [
                _cause(
                    f"The disruption budget {pdb_name} needs {desired} healthy pods and has "
                    f"{healthy} currently"
                )
            ],
        )
    updated = clone(pdb)
    updated["status"]["disruptionsAllowed"] = allowed - 1
    disrupted = updated["status"].setdefault("disruptedPods", {})
    disrupted[pod["metadata"]["name"]] = rfc3339(api.now())
    if allowed - 1 == 0:
        generation = int(pdb["metadata"].get("generation", 1))
        updated["status"]["conditions"] = [
            disruption.condition(status, False, generation, api.now())
        ]
    api.storage.put(PDBS, updated)


def _cause(message: str) -> Obj:
    return {"reason": "DisruptionBudget", "message": message}
