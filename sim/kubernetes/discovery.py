"""Discovery documents as kubectl and the client read them: /version, /api (APIVersions),
/apis (APIGroupList), /apis/<group> (APIGroup), /api/v1 and /apis/<group>/<version>
(APIResourceList with verbs, short names and subresources)."""

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
