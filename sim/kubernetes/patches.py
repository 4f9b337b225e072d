"""The three patch formats of the API server, on JSON data.

- JSON merge patch (RFC 7386): maps merge, `null` deletes, lists are replaced.
- Strategic merge patch (k8s.io/apimachinery/pkg/util/strategicpatch): like a merge patch, but
  the lists the Kubernetes types mark `patchStrategy: merge` merge element by element on their
  merge key (conditions by `type`, containers by `name`, ...; MERGE_KEYS lists the ones the
  built-in kinds here have), `finalizers` merge as a set, and the directives `$patch: delete` /
  `$patch: replace`, `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` work.
- JSON patch (RFC 6902): add, remove, replace, move, copy, test on JSON pointers.
"""

from __future__ import annotations

from typing import Any

from sim.kubernetes.meta import clone

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def accepted(*, custom: bool) -> tuple[str, ...]:
    """The patch types a resource takes: no strategic merge for custom resources (as for CRDs),
    no server-side apply anywhere."""
    return (JSON_PATCH, MERGE) if custom else (JSON_PATCH, MERGE, STRATEGIC)


# Merge keys of the `patchStrategy: merge` lists, by path from the object root ("*" = any
# element of a list). From the Go types' patchMergeKey tags (k8s.io/api core/v1, meta/v1).
MERGE_KEYS: dict[str, str] = {
    "metadata.ownerReferences": "uid",
    "spec.containers": "name",
    "spec.initContainers": "name",
    "spec.ephemeralContainers": "name",
    "spec.volumes": "name",
    "spec.imagePullSecrets": "name",
    "spec.schedulingGates": "name",
    "spec.resourceClaims": "name",
    "spec.containers.*.env": "name",
    "spec.containers.*.ports": "containerPort",
    "spec.containers.*.volumeMounts": "mountPath",
    "spec.initContainers.*.env": "name",
    "spec.initContainers.*.volumeMounts": "mountPath",
    "spec.taints": "key",
    "status.conditions": "type",
    "status.containerStatuses": "name",
    "status.initContainerStatuses": "name",
    "status.ephemeralContainerStatuses": "name",
    "status.podIPs": "ip",
    "status.addresses": "type",
    "status.resourceClaimStatuses": "name",
}
SET_LISTS = frozenset({"metadata.finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied; the message says why."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, path: str = "") -> Any:
    if not isinstance(patch, dict):
        return clone(patch)
    if patch.get("$patch") == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if patch.get("$patch") == "delete":
        return None
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/") or key in ("$retainKeys", "$patch"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            doomed = set(map(str, value or []))
            result[field] = [v for v in result.get(field) or [] if str(v) not in doomed]
            continue
        child = f"{path}.{key}" if path else key
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(result.get(key), value, child)
        else:
            merged = strategic_merge(result.get(key), value, child)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    return result


def _merge_list(current: Any, patch: list[Any], path: str) -> list[Any]:
    current = current if isinstance(current, list) else []
    if path in SET_LISTS:
        merged = list(current)
        merged += [v for v in patch if v not in merged]
        return merged
    key = MERGE_KEYS.get(path)
    if key is None:
        if any(isinstance(v, dict) and v.get("$patch") == "replace" for v in patch):
            return [clone(v) for v in patch if not (isinstance(v, dict) and "$patch" in v)]
        return clone(patch)
    merged = [clone(v) for v in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item} does not contain declared merge key: {key}")
        directive = item.get("$patch")
        index = next(
            (i for i, v in enumerate(merged) if isinstance(v, dict) and v.get(key) == item[key]),
            None,
        )
        if directive == "delete":
            if index is not None:
                del merged[index]
        elif index is None:
            merged.append({k: clone(v) for k, v in item.items() if k != "$patch"})
        else:
            merged[index] = strategic_merge(merged[index], item, f"{path}.*")
    return merged


def json_patch(target: Any, operations: Any) -> Any:
    if not isinstance(operations, list):
        raise PatchError("a JSON patch must be a list of operations")
    doc = clone(target)
    for k, op in enumerate(operations):
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"operation {k}: needs op and path")
        kind = op["op"]
        if kind == "test":
            if _get(doc, op["path"]) != op.get("value"):
                raise PatchError(f"testing value {op['path']} failed")
        elif kind == "remove":
            doc = _remove(doc, op["path"])
        elif kind in ("add", "replace"):
            if kind == "replace":
                _get(doc, op["path"])  # must exist
                doc = _remove(doc, op["path"])
            doc = _add(doc, op["path"], clone(op.get("value")))
        elif kind in ("move", "copy"):
            value = clone(_get(doc, op["from"]))
            if kind == "move":
                doc = _remove(doc, op["from"])
            doc = _add(doc, op["path"], value)
        else:
            raise PatchError(f"Unexpected kind: {kind}")
    return doc


def _tokens(pointer: str) -> list[str]:
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise PatchError(f"JSON pointer {pointer!r} must start with /")
    return [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]


def _parent(doc: Any, pointer: str) -> tuple[Any, str]:
    tokens = _tokens(pointer)
    if not tokens:
        raise PatchError("the root cannot be a target here")
    node = doc
    for token in tokens[:-1]:
        node = _step(node, token, pointer)
    return node, tokens[-1]


def _step(node: Any, token: str, pointer: str) -> Any:
    if isinstance(node, dict) and token in node:
        return node[token]
    if isinstance(node, list) and token.isdigit() and int(token) < len(node):
        return node[int(token)]
    raise PatchError(f"doc is missing path: {pointer}")


def _get(doc: Any, pointer: str) -> Any:
    node = doc
    for token in _tokens(pointer):
        node = _step(node, token, pointer)
    return node


def _add(doc: Any, pointer: str, value: Any) -> Any:
    if pointer == "":
        return value
    parent, token = _parent(doc, pointer)
    if isinstance(parent, dict):
        parent[token] = value
    elif isinstance(parent, list):
        index = len(parent) if token == "-" else int(token) if token.isdigit() else -1
        if not 0 <= index <= len(parent):
            raise PatchError(f"add operation does not apply: index {token} out of range")
        parent.insert(index, value)
    else:
        raise PatchError(f"doc is missing path: {pointer}")
    return doc


def _remove(doc: Any, pointer: str) -> Any:
    parent, token = _parent(doc, pointer)
    if isinstance(parent, dict) and token in parent:
        del parent[token]
    elif isinstance(parent, list) and token.isdigit() and int(token) < len(parent):
        del parent[int(token)]
    else:
        raise PatchError(f"remove operation does not apply: doc is missing path: {pointer}")
    return doc
