"""The kube-controller-manager loops a cluster needs for the API to behave, run synchronously on
every change the store records:

- garbage collector: a removed owner's dependents (by ownerReferences uid) are deleted once all
  their owners are gone (a dependent with another live owner only loses the dangling reference);
  a foreground deletion ends when no dependent with blockOwnerDeletion is left;
- namespace controller: a terminating namespace goes once its content is gone;
- disruption controller: PodDisruptionBudget status (sim/kubernetes/disruption.py);
- resourceclaim controller: a pod's claims from ResourceClaimTemplates are created (named
  `<pod>-<claim>-<suffix>`, owned by the pod, recorded in status.resourceClaimStatuses); a pod
  that is gone or finished leaves its claims' reservedFor, and a claim nobody reserves any more
  is deallocated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.kubernetes import disruption
from sim.kubernetes.meta import clone
from sim.kubernetes.resources import core, named
from sim.kubernetes.store import ADDED, DELETED, Change

if TYPE_CHECKING:
    from sim.kubernetes.registry import Registry

Obj = dict[str, Any]
PODS = core("pods")
CLAIMS = named("resource.k8s.io/resourceclaims")
TEMPLATES = named("resource.k8s.io/resourceclaimtemplates")
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"


def install(api: Registry) -> None:
    api.reactions.extend((collect_garbage, finish_namespaces, disruption.react, claims))


def collect_garbage(api: Registry, change: Change) -> None:
    if change.type != DELETED:
        return
    meta = change.obj["metadata"]
    api.delete_dependents(str(meta.get("uid", "")))
    for ref in meta.get("ownerReferences") or []:
        api.finish_foreground(str(ref.get("uid", "")))


def finish_namespaces(api: Registry, change: Change) -> None:
    namespace = change.obj["metadata"].get("namespace")
    if change.type == DELETED and namespace:
        api.finish_namespace(str(namespace))


def claims(api: Registry, change: Change) -> None:
    if change.resource is PODS:
        if change.type == ADDED:
            create_template_claims(api, change.obj)
        phase = (change.obj.get("status") or {}).get("phase")
        if change.type == DELETED or phase in ("Succeeded", "Failed"):
            release(api, change.obj)
    elif change.resource is TEMPLATES and change.type == ADDED:
        namespace = str(change.obj["metadata"].get("namespace") or "")
        for pod in api.storage.items(PODS, namespace):
            create_template_claims(api, pod)


def create_template_claims(api: Registry, pod: Obj) -> None:
    meta = pod["metadata"]
    namespace, uid = str(meta.get("namespace") or ""), str(meta.get("uid") or "")
    done = {s.get("name") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    made = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or []:
        template_name = entry.get("resourceClaimTemplateName")
        if not template_name or entry.get("name") in done:
            continue
        template = api.storage.get(TEMPLATES, namespace, str(template_name))
        if template is None:
            continue  # created once the template appears
        claim = {
            "metadata": {
                "generateName": f"{meta['name']}-{entry['name']}-"[:58],
                "annotations": {POD_CLAIM_NAME: entry["name"]},
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "name": meta["name"],
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
                **clone((template.get("spec") or {}).get("metadata") or {}),
            },
            "spec": clone((template.get("spec") or {}).get("spec") or {}),
        }
        created = api.create(CLAIMS, namespace, claim)
        made.append({"name": entry["name"], "resourceClaimName": created["metadata"]["name"]})
    if made:
        current = clone(api.storage.get(PODS, namespace, meta["name"]))
        status = current.setdefault("status", {})
        status["resourceClaimStatuses"] = [*status.get("resourceClaimStatuses", []), *made]
        api.storage.put(PODS, current)


def release(api: Registry, pod: Obj) -> None:
    meta = pod["metadata"]
    uid = meta.get("uid")
    for claim in api.storage.items(CLAIMS, str(meta.get("namespace") or "")):
        status = claim.get("status") or {}
        reserved = status.get("reservedFor") or []
        if not any(r.get("uid") == uid for r in reserved):
            continue
        updated = clone(claim)
        left = [r for r in reserved if r.get("uid") != uid]
        updated["status"]["reservedFor"] = left
        if not left:
            updated["status"].pop("reservedFor")
            updated["status"].pop("allocation", None)
            finalizers = [
                f for f in updated["metadata"].get("finalizers") or [] if f != DELETE_PROTECTION
            ]
            if finalizers:
                updated["metadata"]["finalizers"] = finalizers
            else:
                updated["metadata"].pop("finalizers", None)
        api.write(CLAIMS, updated)
