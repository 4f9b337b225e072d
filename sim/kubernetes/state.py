"""The store's test API: direct reads and writes of cluster state, for tests and for the cluster
builder, bypassing HTTP and admission the way `kubectl` with cluster-admin rights and a
controller would not have to. Writes still go through the store, so they get resourceVersions,
reach every watch, and trigger the controllers (garbage collection, budgets, claims).

    add_node(obj) / update_node(name, change) / delete_node(name)
    add_pod(obj) / pod(ns, name) / update_pod(ns, name, change) / delete_pod(ns, name)
    put(key, obj) / get_object(key, ns, name) / update_object(key, ns, name, change)
    delete_object(key, ns, name) / objects(key)         key: "pods", "policy/poddisruptionbudgets"
    add_namespace(name) / set_nrt(obj) / compact()
    events (events.k8s.io, oldest first) / leases ({"ns/name": lease})

`delete_*` removes at once (like `--force --grace-period=0`); `update_*` applies `change` to a
copy of the current object. Reads return copies.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.kubernetes.meta import clone, new_uid, rfc3339
from sim.kubernetes.registry import Registry
from sim.kubernetes.resources import core, named

Obj = dict[str, Any]
Change = Callable[[Obj], None]


class StateHelpers:
    registry: Registry

    # --- generic ---------------------------------------------------------------------------

    def put(self, key: str, obj: Obj) -> Obj:
        """Store `obj` as it is (metadata defaults filled in); the stored copy."""
        resource = named(key)
        doc = clone(obj)
        doc.setdefault("apiVersion", resource.api_version())
        doc.setdefault("kind", resource.kind)
        meta = doc.setdefault("metadata", {})
        with self.registry.lock:
            if resource.namespaced:
                meta.setdefault("namespace", "default")
                self.add_namespace(str(meta["namespace"]))
            existing = self.registry.storage.get(
                resource, str(meta.get("namespace") or ""), meta["name"]
            )
            if existing is not None:
                meta.setdefault("uid", existing["metadata"].get("uid"))
                meta.setdefault("creationTimestamp", existing["metadata"].get("creationTimestamp"))
            meta.setdefault("uid", new_uid())
            meta.setdefault("creationTimestamp", rfc3339(self.registry.now()))
            if resource.tracks_generation:
                meta.setdefault("generation", 1)
            self.registry.storage.put(resource, doc)
            return clone(doc)

    def get_object(self, key: str, namespace: str, name: str) -> Obj:
        resource = named(key)
        with self.registry.lock:
            return clone(
                self.registry.read(resource, namespace if resource.namespaced else "", name)
            )

    def update_object(self, key: str, namespace: str, name: str, change: Change) -> Obj:
        resource = named(key)
        with self.registry.lock:
            obj = clone(
                self.registry.read(resource, namespace if resource.namespaced else "", name)
            )
            change(obj)
            self.registry.storage.put(resource, obj)
            return clone(obj)

    def delete_object(self, key: str, namespace: str, name: str) -> Obj:
        resource = named(key)
        with self.registry.lock:
            where = namespace if resource.namespaced else ""
            self.registry.read(resource, where, name)
            return self.registry.storage.remove(resource, where, name).obj

    def objects(self, key: str, namespace: str | None = None) -> list[Obj]:
        return [clone(o) for o in self.registry.storage.items(named(key), namespace)]

    def add_namespace(self, name: str) -> None:
        namespaces = core("namespaces")
        with self.registry.lock:
            if self.registry.storage.get(namespaces, "", name) is None:
                self.registry.create(namespaces, "", {"metadata": {"name": name}})

    # --- the kinds tests use most ------------------------------------------------------------

    def add_node(self, obj: Obj) -> Obj:
        return self.put("nodes", obj)

    def update_node(self, name: str, change: Change) -> Obj:
        return self.update_object("nodes", "", name, change)

    def delete_node(self, name: str) -> None:
        self.delete_object("nodes", "", name)

    def add_pod(self, obj: Obj) -> Obj:
        doc = clone(obj)
        doc.setdefault("status", {"phase": "Pending"})
        doc.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
        return self.put("pods", doc)

    def pod(self, namespace: str, name: str) -> Obj:
        return self.get_object("pods", namespace, name)

    def update_pod(self, namespace: str, name: str, change: Change) -> Obj:
        return self.update_object("pods", namespace, name, change)

    def delete_pod(self, namespace: str, name: str) -> None:
        self.delete_object("pods", namespace, name)

    def set_nrt(self, obj: Obj) -> Obj:
        return self.put("noderesourcetopologies", obj)

    def compact(self) -> None:
        """Forget the history: every watch from a version before now gets 410 Expired."""
        self.registry.storage.compact()

    @property
    def events(self) -> list[Obj]:
        found = self.objects("events.k8s.io/events")
        return sorted(found, key=lambda e: int(e["metadata"]["resourceVersion"]))

    @property
    def leases(self) -> dict[str, Obj]:
        return {
            f"{o['metadata']['namespace']}/{o['metadata']['name']}": o
            for o in self.objects("leases")
        }
