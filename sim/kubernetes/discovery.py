"""Discovery documents as kubectl and the client read them: /version, /api (APIVersions),
/apis (APIGroupList), /apis/<group> (APIGroup), /api/v1 and /apis/<group>/<version>
(APIResourceList with verbs, short names and subresources), and OpenAPI v3.

OpenAPI v3 (/openapi/v3 lists a document per group version, k8s.io/client-go/openapi) is served
as far as the paths go: each kind's create, update and patch operations with their
`x-kubernetes-group-version-kind` and the `fieldValidation` query parameter, no schemas. That is
what kubectl reads to learn that the server validates fields itself (cli-runtime
pkg/resource/query_param_verifier_v3.go), so `kubectl create -f` and `kubectl apply -f` run
without `--validate=false`; without schemas kubectl apply builds its strategic merge patches
from its compiled-in types, as it does for a server without OpenAPI. `kubectl explain` needs the
schemas and does not work. The server accepts `fieldValidation` and does not check fields."""

from __future__ import annotations

from typing import Any

from sim.kubernetes.resources import ALL_VERBS, TABLE, groups

Obj = dict[str, Any]
VERSION = {
    "major": "1",
    "minor": "37",
    "gitVersion": "v1.37.0+gpusched-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
IN_ALL = ("/pods", "batch/jobs")  # the served kinds of the `all` category (`kubectl get all`)
SUBRESOURCE_VERBS = {
    "status": ["get", "patch", "update"],
    "binding": ["create"],
    "eviction": ["create"],
}


def api_versions(address: str) -> Obj:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(name: str, versions: list[str]) -> Obj:
    entries = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": entries, "preferredVersion": entries[0]}


def group_list() -> Obj:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(name, versions) for name, versions in groups().items()],
    }


def group(name: str) -> Obj | None:
    versions = groups().get(name)
    if versions is None:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name, versions)}


def resource_list(group_name: str, version: str, served: dict[str, tuple[str, ...]]) -> Obj | None:
    rows = [r for r in TABLE if r.group == group_name and version in served[r.key]]
    if not rows:
        return None
    resources: list[Obj] = []
    for r in rows:
        resources.append(
            {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(ALL_VERBS),
                **({"shortNames": list(r.short_names)} if r.short_names else {}),
                **({"categories": ["all"]} if r.key in IN_ALL else {}),
            }
        )
        for sub in r.subresources:
            kind = {"binding": "Binding", "eviction": "Eviction"}.get(sub, r.kind)
            entry: Obj = {
                "name": f"{r.plural}/{sub}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": SUBRESOURCE_VERBS[sub],
            }
            if sub == "eviction":
                entry.update(group="policy", version="v1")
            resources.append(entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group_name}/{version}" if group_name else version,
        "resources": resources,
    }


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def openapi_v3(path: str, served: dict[str, tuple[str, ...]]) -> Obj | None:
    """/openapi/v3 (path "") or one group version's document (path "api/v1", "apis/g/v")."""
    versions = sorted({(r.group, v) for r in TABLE for v in served[r.key]})
    if not path:
        return {
            "paths": {
                _gv_path(g, v): {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash=sim"}
                for g, v in versions
            }
        }
    for group, version in versions:
        if _gv_path(group, version) == path:
            return _openapi_document(group, version, served)
    return None


_FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "fieldValidation instructs the server on how to handle objects in the request "
    "containing unknown or duplicate fields.",
    "schema": {"type": "string", "uniqueItems": True},
}


def _operation(verb: str, gvk: Obj, types: list[str]) -> Obj:
    return {
        "operationId": f"{verb}{gvk['kind']}",
        "parameters": [_FIELD_VALIDATION],
        "requestBody": {"content": {t: {"schema": {"type": "object"}} for t in types}},
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": verb,
        "x-kubernetes-group-version-kind": gvk,
    }


def _openapi_document(group: str, version: str, served: dict[str, tuple[str, ...]]) -> Obj:
    paths: Obj = {}
    for r in TABLE:
        if r.group != group or version not in served[r.key]:
            continue
        gvk = {"group": group, "version": version, "kind": r.kind}
        prefix = f"/{_gv_path(group, version)}"
        space = f"{prefix}/namespaces/{{namespace}}" if r.namespaced else prefix
        body_types = ["application/json", "application/merge-patch+json",
                      "application/json-patch+json"]  # fmt: skip
        if not r.custom:
            body_types.append("application/strategic-merge-patch+json")

        paths[f"{space}/{r.plural}"] = {"post": _operation("post", gvk, ["application/json"])}
        paths[f"{space}/{r.plural}/{{name}}"] = {
            "put": _operation("put", gvk, ["application/json"]),
            "patch": _operation("patch", gvk, body_types[1:]),
        }
    title = "Kubernetes"
    return {"openapi": "3.0.0", "info": {"title": title, "version": VERSION["gitVersion"]},
            "paths": paths, "components": {}}  # fmt: skip
