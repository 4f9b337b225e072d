"""pods/binding: the scheduler's write, as the API server's BindingREST does it
(pkg/registry/core/pod/storage): 201 with a `Status`; the Binding's annotations copied onto the
pod with spec.nodeName and PodScheduled=True in one write. Refused with 409 when the Binding's
uid is not the pod's (a precondition), the pod is being deleted, already bound, or still has
scheduling gates; 404 when the pod does not exist; 422 without a target node."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import errors, podstatus
from sim.kubernetes.resources import core

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
PODS = core("pods")
BINDING = "pods/binding"


def bind(api: Registry, namespace: str, name: str, body: Any) -> Obj:
    if not isinstance(body, dict) or body.get("kind", "Binding") not in ("Binding", None, ""):
        raise errors.bad_request("the body must be a Binding")
    target = body.get("target") or {}
    if target.get("kind", "Node") not in ("Node", "", None) or not target.get("name"):
        raise errors.ApiError(
            422,
            "Invalid",
            f'Binding "{name}" is invalid: target.name: Required value',
            {"name": name, "kind": "Binding", "causes": [errors.required("target.name").cause()]},
        )
    meta = body.get("metadata") or {}
    with api.lock:
        pod = api.read(PODS, namespace, name)
        uid = pod["metadata"].get("uid")
        if meta.get("uid") and meta["uid"] != uid:
            raise errors.conflict(
                PODS,
                name,
                f"Precondition failed: UID in precondition: {meta['uid']}, "
                f"UID in object meta: {uid}",
            )
        spec = pod.get("spec") or {}
        refusal = ""
        if pod["metadata"].get("deletionTimestamp"):
            refusal = f"pod {name} is being deleted, cannot be assigned to a host"
        elif spec.get("nodeName"):
            refusal = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        elif spec.get("schedulingGates"):
            refusal = f"pod {name} has non-empty .spec.schedulingGates"
        if refusal:
            raise errors.conflict(PODS, name, refusal, qualified=BINDING)
        # Stored objects are never changed in place, so the new one shares what it does not change.
        metadata = dict(pod["metadata"])
        if meta.get("annotations"):
            metadata["annotations"] = {**(metadata.get("annotations") or {}), **meta["annotations"]}
        status = dict(pod.get("status") or {})
        bound = {**pod, "metadata": metadata, "spec": {**spec, "nodeName": str(target["name"])}}
        bound["status"] = status
        podstatus.set_condition(status, "PodScheduled", api.now())
        api.storage.put(PODS, bound)
    return errors.success(201)
