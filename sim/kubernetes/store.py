"""The object store under the simulated API server: objects by resource, namespace and name, one
cluster-wide resourceVersion counter, and a bounded history of changes per resource for watches.

Stored objects are never changed in place: a write stores a new dict and the old one stays valid
for whoever still holds it (a watcher encoding it, a list being paged), so reads need no copies.
Each change is encoded to its watch line once per served version and shared by every watcher.

A watch resumes from any resourceVersion still in the history; an older one is `410 Expired`, as
after an etcd compaction. The history keeps the last `history_limit` changes of each resource
(etcd keeps about five minutes under kube-apiserver's default compaction interval; a count bound
keeps memory bounded here whatever the write rate).
"""

from __future__ import annotations

import bisect
import json
import threading
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sim.kubernetes import errors
from sim.kubernetes.resources import STORED, Resource, stored

Obj = dict[str, Any]
ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


@dataclass(slots=True)
class Change:
    revision: int
    type: str
    resource: Resource
    obj: Obj  # the new state; for DELETED the last state, carrying the deletion's revision
    previous: Obj | None
    _lines: dict[tuple[str, str, str, str], bytes] = field(default_factory=dict)

    def line(
        self,
        kind: str,
        obj: Obj,
        api_version: str,
        *,
        variant: str = "",
        render: Callable[[Obj], Obj] | None = None,
        shape: str = "",
    ) -> bytes:
        """The watch line `{"type","object"}` for `obj` (this change's object, or a `variant` of
        it such as its previous state), encoded once per served version and `shape` (what
        `render` makes of it: another version's shape, a Table row)."""
        key = (kind, variant, api_version, shape)
        cached = self._lines.get(key)
        if cached is None:
            if render is not None:
                obj = render(obj)
            elif obj.get("apiVersion") != api_version:
                obj = {**obj, "apiVersion": api_version}
            cached = (json.dumps({"type": kind, "object": obj}) + "\n").encode()
            self._lines[key] = cached
        return cached


class Storage:
    def __init__(self, *, history_limit: int = 20_000) -> None:
        self.lock = threading.RLock()
        self.revision = 1
        self.history_limit = history_limit
        # By storage key: a resource served in another shape (core/v1 events) shares its store.
        self._objects: dict[str, dict[str, dict[str, Obj]]] = {r.key: {} for r in STORED}
        self._history: dict[str, deque[Change]] = {r.key: deque() for r in STORED}
        self._compacted: dict[str, int] = {r.key: 0 for r in STORED}
        self._changed = {r.key: threading.Condition(self.lock) for r in STORED}
        self.by_uid: dict[str, tuple[Resource, str, str]] = {}
        self.dependents: dict[str, set[tuple[str, str, str]]] = {}  # owner uid -> objects
        self.listeners: list[Callable[[Change], None]] = []

    # --- reads ----------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> Obj | None:
        return self._objects[resource.storage_key].get(namespace, {}).get(name)

    def items(self, resource: Resource, namespace: str | None = None) -> list[Obj]:
        """Objects in key order: by namespace, then name."""
        with self.lock:
            spaces = self._objects[resource.storage_key]
            names = [namespace] if namespace is not None else sorted(spaces)
            out: list[Obj] = []
            for space in names:
                objects = spaces.get(space, {})
                out.extend(objects[name] for name in sorted(objects))
            return out

    def count(self, resource: Resource, namespace: str | None = None) -> int:
        spaces = self._objects[resource.storage_key]
        if namespace is not None:
            return len(spaces.get(namespace, {}))
        return sum(len(objects) for objects in spaces.values())

    def find(self, uid: str) -> Obj | None:
        where = self.by_uid.get(uid)
        return self.get(*where) if where else None

    # --- writes ---------------------------------------------------------------------------

    def put(self, resource: Resource, obj: Obj) -> Change:
        """Store `obj` (a fresh dict nobody else changes) as the new state of its key."""
        resource = stored(resource)
        with self.lock:
            meta = obj["metadata"]
            namespace, name = str(meta.get("namespace") or ""), str(meta["name"])
            spaces = self._objects[resource.storage_key]
            previous = spaces.get(namespace, {}).get(name)
            self.revision += 1
            meta["resourceVersion"] = str(self.revision)
            spaces.setdefault(namespace, {})[name] = obj
            self._index(resource, namespace, name, previous, obj)
            kind = MODIFIED if previous is not None else ADDED
            return self._record(Change(self.revision, kind, resource, obj, previous))

    def remove(self, resource: Resource, namespace: str, name: str) -> Change:
        resource = stored(resource)
        with self.lock:
            spaces = self._objects[resource.storage_key]
            previous = spaces[namespace].pop(name)
            if not spaces[namespace]:
                del spaces[namespace]
            self.revision += 1
            gone = {**previous, "metadata": {**previous["metadata"]}}
            gone["metadata"]["resourceVersion"] = str(self.revision)
            self._index(resource, namespace, name, previous, None)
            return self._record(Change(self.revision, DELETED, resource, gone, previous))

    def _index(
        self, resource: Resource, namespace: str, name: str, old: Obj | None, new: Obj | None
    ) -> None:
        where = (resource.key, namespace, name)
        for doc, adding in ((old, False), (new, True)):
            if doc is None:
                continue
            meta = doc["metadata"]
            uid = meta.get("uid")
            if uid:
                if adding:
                    self.by_uid[uid] = (resource, namespace, name)
                elif new is None or new["metadata"].get("uid") != uid:
                    self.by_uid.pop(uid, None)
            for ref in meta.get("ownerReferences") or []:
                owner = str(ref.get("uid", ""))
                if adding:
                    self.dependents.setdefault(owner, set()).add(where)
                elif owner in self.dependents:
                    self.dependents[owner].discard(where)
                    if not self.dependents[owner]:
                        del self.dependents[owner]

    def _record(self, change: Change) -> Change:
        key = change.resource.key
        history = self._history[key]
        history.append(change)
        while len(history) > self.history_limit:
            self._compacted[key] = history.popleft().revision
        self._changed[key].notify_all()
        for listener in self.listeners:
            listener(change)
        return change

    # --- history --------------------------------------------------------------------------

    def changes_since(self, resource: Resource, revision: int) -> list[Change]:
        """Every change of `resource` after `revision`; 410 Expired when some were compacted."""
        with self.lock:
            compacted = self._compacted[resource.storage_key]
            if revision < compacted:
                raise errors.expired(f"too old resource version: {revision} ({compacted})")
            history = self._history[resource.storage_key]
            if not history or history[-1].revision <= revision:
                return []
            start = bisect.bisect_right(history, revision, key=lambda c: c.revision)
            return [history[i] for i in range(start, len(history))]

    def wait(self, resource: Resource, revision: int, timeout_s: float) -> None:
        """Block until `resource` changes after `revision` or the timeout passes."""
        with self.lock:
            history = self._history[resource.storage_key]
            if history and history[-1].revision > revision:
                return
            self._changed[resource.storage_key].wait(timeout_s)

    def compacted(self, resource: Resource) -> int:
        return self._compacted[resource.storage_key]

    def compact(self) -> None:
        """Forget all history: a watch from any version before now gets 410 Expired."""
        with self.lock:
            for key, history in self._history.items():
                history.clear()
                self._compacted[key] = self.revision

    def wake_all(self) -> None:
        """Wake every waiting watcher (the server is shutting down)."""
        with self.lock:
            for condition in self._changed.values():
                condition.notify_all()

    def all_objects(self) -> Iterator[tuple[Resource, Obj]]:
        for r in STORED:
            for obj in self.items(r):
                yield r, obj
