"""The API server's verbs over the store, with its metadata semantics (k8s.io/apiserver
pkg/registry/generic/registry): create, get, list, update, patch, delete, deletecollection.

- create: server-set uid, creationTimestamp, generation, a name from generateName; the status of
  a kind with a status subresource is dropped (nodes and namespaces keep theirs); the namespace
  must exist and not be terminating; 409 AlreadyExists; 422 Invalid with causes.
- update / patch: a stale resourceVersion is 409 Conflict; system metadata is kept; the main
  resource ignores status changes and the status subresource ignores everything else; a no-op
  writes nothing; generation moves when anything outside metadata and status changed.
- delete: preconditions (uid, resourceVersion) are 409; pods are deleted gracefully; finalizers
  keep an object (with deletionTimestamp) until they are removed; propagationPolicy Background
  (the default), Foreground or Orphan is carried out by the garbage collector
  (sim/kubernetes/controllers.py).
- list: label and field selectors, limit/continue paging over one consistent snapshot (tokens
  expire with the history: 410), the collection's resourceVersion.

Every verb runs under the store's lock, so each is atomic; responses are encoded outside it.
"""

from __future__ import annotations

import base64
import json
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sim.kubernetes import errors, patches, selectors
from sim.kubernetes.kinds import rules_for, view_for
from sim.kubernetes.meta import clone, new_uid, rfc3339, validate_metadata
from sim.kubernetes.resources import BY_KEY, STORED, Resource, core, stored
from sim.kubernetes.store import Change, Storage

Obj = dict[str, Any]
_NAME_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery's generateName alphabet
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can "
    "start a new list without the continue parameter, or use the continue token in this "
    "response to retrieve the remainder of the results. Continuing with the provided token "
    "results in an inconsistent list - objects that were created, modified, or deleted between "
    "the time the first chunk was returned and now may show up in the list."
)
FOREGROUND = "foregroundDeletion"
NAMESPACES = "/namespaces"
_SYSTEM_META = (
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
)


@dataclass
class Page:
    items: list[Obj]
    revision: int
    continue_token: str | None = None
    remaining: int | None = None


class Registry:
    def __init__(
        self,
        storage: Storage | None = None,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        max_pages: int = 512,
    ) -> None:
        self.storage = storage or Storage()
        self.clock = clock
        self._pages: OrderedDict[str, tuple[Resource, int, list[Obj]]] = OrderedDict()
        self._max_pages = max_pages
        self.reactions: list[Callable[[Registry, Change], None]] = []
        self.storage.listeners.append(self._react)

    @property
    def lock(self) -> Any:
        return self.storage.lock

    def now(self) -> datetime:
        return self.clock()

    def _react(self, change: Change) -> None:
        for reaction in self.reactions:
            reaction(self, change)

    # --- reads ----------------------------------------------------------------------------

    def read(self, resource: Resource, namespace: str, name: str) -> Obj:
        obj = self.storage.get(resource, namespace, name)
        if obj is None:
            raise errors.not_found(resource, name)
        return obj

    def list_page(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        token: str = "",
    ) -> Page:
        labels = selectors.parse_labels(label_selector)
        fields = selectors.parse_fields(field_selector, resource)
        with self.lock:
            if token:
                revision, items = self._continue(resource, token)
            else:
                revision = self.storage.revision
                items = [
                    obj
                    for obj in self.storage.items(resource, namespace)
                    if labels.matches(obj["metadata"].get("labels") or {})
                    and selectors.fields_match(fields, obj)
                ]
            if limit <= 0 or len(items) <= limit:
                return Page(items, revision)
            rest = items[limit:]
            last = items[limit - 1]["metadata"]
            start = f"{last.get('namespace') or ''}/{last['name']}\x00"
            doc = {"v": "meta.k8s.io/v1", "rv": revision, "start": start}
            next_token = base64.urlsafe_b64encode(json.dumps(doc).encode()).decode()
            self._pages[next_token] = (resource, revision, rest)
            while len(self._pages) > self._max_pages:
                self._pages.popitem(last=False)
            filtered = bool(label_selector or field_selector)
            return Page(items[:limit], revision, next_token, None if filtered else len(rest))

    def _continue(self, resource: Resource, token: str) -> tuple[int, list[Obj]]:
        try:
            doc = json.loads(base64.urlsafe_b64decode(token.encode()))
            revision = int(doc["rv"])
        except (ValueError, KeyError, TypeError) as exc:
            raise errors.bad_request(f"continue key is not valid: {exc}") from exc
        page = self._pages.pop(token, None)
        if page is None or page[0] != resource or revision < self.storage.compacted(resource):
            raise errors.expired(CONTINUE_EXPIRED)
        return revision, page[2]

    # --- create ---------------------------------------------------------------------------

    def create(
        self, resource: Resource, namespace: str, body: Any, *, dry_run: bool = False
    ) -> Obj:
        obj = decode(resource, body)
        meta = obj["metadata"]
        rules = rules_for(resource.key)
        with self.lock:
            if resource.namespaced:
                if meta.get("namespace") not in (None, "", namespace):
                    raise errors.bad_request(
                        "the namespace of the provided object does not match the namespace sent "
                        "on the request"
                    )
                meta["namespace"] = namespace
                self._check_namespace(resource, namespace, str(meta.get("name") or ""))
            else:
                meta.pop("namespace", None)
            for key in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds",
                        "selfLink", "managedFields"):  # fmt: skip
                meta.pop(key, None)
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = rfc3339(self.now())
            if resource.tracks_generation:
                meta["generation"] = 1
            else:
                meta.pop("generation", None)
            if resource.has_status and not resource.status_on_create:
                obj.pop("status", None)
            # The name first (the store's generateName retry, 1.31+), so defaults see it.
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._generate_name(resource, namespace, str(meta["generateName"]))
            rules.prepare_create(self, obj)
            name = str(meta.get("name") or "")
            problems = validate_metadata(
                meta, namespaced=resource.namespaced, dns_label=rules.dns_label_names
            )
            problems += rules.validate(self, obj, None, "")
            if problems:
                raise errors.invalid_object(resource, name, problems)
            if self.storage.get(resource, namespace if resource.namespaced else "", name):
                raise errors.already_exists(resource, name)
            if dry_run:
                return obj
            self.storage.put(resource, obj)
            return obj

    def _check_namespace(self, resource: Resource, namespace: str, name: str) -> None:
        space = self.storage.get(core("namespaces"), "", namespace)
        if space is None:
            raise errors.not_found(core("namespaces"), namespace)
        if space["metadata"].get("deletionTimestamp"):
            raise errors.forbidden(
                resource,
                name,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
            )

    def _generate_name(self, resource: Resource, namespace: str, prefix: str) -> str:
        prefix = prefix[:58]
        while True:
            name = prefix + "".join(random.choice(_NAME_SUFFIX) for _ in range(5))
            if self.storage.get(resource, namespace, name) is None:
                return name

    # --- update and patch -----------------------------------------------------------------

    def replace(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        new = decode(resource, body)
        with self.lock:
            old = self.read(resource, namespace, name)
            if new["metadata"].get("name") != name:
                raise errors.bad_request(
                    f"the name of the object ({new['metadata'].get('name')}) does not match the "
                    f"name on the URL ({name})"
                )
            version = new["metadata"].get("resourceVersion")
            if not version and resource.custom:
                raise errors.invalid_object(
                    resource,
                    name,
                    [
                        errors.invalid(
                            "metadata.resourceVersion", "0x0", "must be specified for an update"
                        )
                    ],
                )
            self._check_version(resource, old, version)
            return self.apply_update(resource, old, new, subresource=subresource, dry_run=dry_run)

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        body: Any,
        content_type: str,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        view = view_for(resource.key)
        with self.lock:
            old = self.read(resource, namespace, name)
            base = view.out(old) if view else old  # a patch applies to the served shape
            try:
                if content_type == patches.MERGE:
                    new = patches.merge_patch(base, body)
                elif content_type == patches.STRATEGIC and not resource.custom:
                    new = patches.strategic_merge(base, body)
                elif content_type == patches.JSON_PATCH:
                    new = patches.json_patch(base, body)
                else:
                    accepted = patches.accepted(custom=resource.custom)
                    raise errors.unsupported_media_type(content_type, accepted)
            except patches.PatchError as exc:
                raise errors.ApiError(422, "", str(exc)) from exc
            if not isinstance(new, dict) or not isinstance(new.get("metadata"), dict):
                raise errors.bad_request("the patch does not leave an object with metadata")
            if new["metadata"].get("name") != name:
                raise errors.bad_request("metadata.name: the patch may not change the name")
            if view:
                new = view.into(new)
            if isinstance(body, dict):
                self._check_version(
                    resource, old, (body.get("metadata") or {}).get("resourceVersion")
                )
            new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
            return self.apply_update(resource, old, new, subresource=subresource, dry_run=dry_run)

    def _check_version(self, resource: Resource, old: Obj, version: object) -> None:
        if version and str(version) != old["metadata"].get("resourceVersion"):
            raise errors.conflict(resource, old["metadata"]["name"], errors.STALE)

    def apply_update(
        self,
        resource: Resource,
        old: Obj,
        new: Obj,
        *,
        subresource: str = "",
        dry_run: bool = False,
    ) -> Obj:
        """Store `new` (a fresh dict) as the next state of `old` with the API server's rules."""
        if subresource == "status":
            new = {**old, "metadata": dict(old["metadata"]), "status": new.get("status")}
            if new["status"] is None:
                new.pop("status")
        else:
            meta = new["metadata"]
            for key in _SYSTEM_META:
                if key in old["metadata"]:
                    meta[key] = old["metadata"][key]
                else:
                    meta.pop(key, None)
            if resource.has_status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
        kept = stored(resource)
        new["apiVersion"], new["kind"] = kept.api_version(), kept.kind
        rules = rules_for(resource.key)
        problems = validate_metadata(
            new["metadata"], namespaced=resource.namespaced, dns_label=rules.dns_label_names
        )
        problems += rules.validate(self, new, old, subresource)
        if problems:
            raise errors.invalid_object(resource, old["metadata"]["name"], problems)
        new["metadata"]["resourceVersion"] = old["metadata"].get("resourceVersion")
        if new == old:
            return old  # a no-op writes nothing and keeps the resourceVersion
        if resource.tracks_generation and _spec_of(new) != _spec_of(old):
            new["metadata"]["generation"] = int(old["metadata"].get("generation") or 0) + 1
        if dry_run:
            return new
        if self._deletable(resource, new):
            return self.storage.remove(resource, *_where(new)).obj
        self.storage.put(resource, new)
        return new

    def write(self, resource: Resource, obj: Obj) -> None:
        """Store a controller's new state of an object as it is (no validation), removing it
        when that completes its deletion."""
        if self._deletable(resource, obj):
            self.storage.remove(resource, *_where(obj))
        else:
            self.storage.put(resource, obj)

    @staticmethod
    def _deletable(resource: Resource, obj: Obj) -> bool:
        """Being deleted, no finalizer left, and (pods) stopped by the kubelet; a namespace goes
        only when the namespace controller has emptied it (finish_namespace)."""
        meta = obj["metadata"]
        if not meta.get("deletionTimestamp") or meta.get("finalizers"):
            return False
        if resource.key == NAMESPACES:
            return False
        return resource.plural != "pods" or int(meta.get("deletionGracePeriodSeconds") or 0) == 0

    # --- delete ---------------------------------------------------------------------------

    def delete(
        self, resource: Resource, namespace: str, name: str, options: Obj | None = None
    ) -> tuple[int, Obj]:
        """(HTTP code, body): 200 with the object (or a Status for kinds that answer so), 202
        when a foreground deletion waits for dependents."""
        options = options or {}
        with self.lock:
            old = self.read(resource, namespace, name)
            self._check_preconditions(resource, old, options.get("preconditions") or {})
            rules = rules_for(resource.key)
            policy = _propagation(options, rules.default_propagation)
            requested = options.get("gracePeriodSeconds")
            grace = rules.grace_period_s(old, int(requested) if requested is not None else None)
            meta = old["metadata"]
            if meta.get("deletionTimestamp"):
                return 200, self._delete_again(resource, old, grace)
            if resource.key == NAMESPACES:
                return 200, self._terminate_namespace(old)
            if policy == "Orphan":
                self._orphan_dependents(meta.get("uid", ""))
            finalizers = list(meta.get("finalizers") or [])
            waits = policy == "Foreground" and bool(
                self.storage.dependents.get(meta.get("uid", ""))
            )
            if waits and FOREGROUND not in finalizers:
                finalizers.append(FOREGROUND)
            if grace > 0 or finalizers:
                obj = clone(old)
                obj["metadata"]["deletionTimestamp"] = rfc3339(
                    self.now() + timedelta(seconds=grace)
                )
                obj["metadata"]["deletionGracePeriodSeconds"] = grace
                if finalizers:
                    obj["metadata"]["finalizers"] = finalizers
                self.storage.put(resource, obj)
                if waits:
                    self.delete_dependents(meta.get("uid", ""), "Foreground")
                    self.finish_foreground(meta.get("uid", ""))
                    current = self.storage.get(resource, namespace, name)
                    return (202 if current is not None else 200), current or obj
                return 200, obj
            gone = self.storage.remove(resource, namespace, name).obj
            if resource.returns_deleted_object:
                return 200, gone
            return 200, errors.success(
                200, {"name": name, "group": resource.group, "kind": resource.plural,
                      "uid": meta.get("uid", "")},
            )  # fmt: skip

    def _delete_again(self, resource: Resource, old: Obj, grace: int) -> Obj:
        """A second delete of a terminating object: a shorter grace period takes effect."""
        meta = old["metadata"]
        current = int(meta.get("deletionGracePeriodSeconds") or 0)
        if resource.plural != "pods" or grace >= current:
            return old
        obj = clone(old)
        obj["metadata"]["deletionTimestamp"] = rfc3339(self.now() + timedelta(seconds=grace))
        obj["metadata"]["deletionGracePeriodSeconds"] = grace
        if self._deletable(resource, obj):
            return self.storage.remove(resource, *_where(obj)).obj
        self.storage.put(resource, obj)
        return obj

    def _check_preconditions(self, resource: Resource, obj: Obj, preconditions: Obj) -> None:
        meta = obj["metadata"]
        uid, version = preconditions.get("uid"), preconditions.get("resourceVersion")
        if uid and uid != meta.get("uid"):
            raise errors.conflict(
                resource,
                meta["name"],
                f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
                f"{meta.get('uid')}",
            )
        if version and version != meta.get("resourceVersion"):
            raise errors.conflict(
                resource,
                meta["name"],
                f"Precondition failed: ResourceVersion in precondition: {version}, "
                f"ResourceVersion in object meta: {meta.get('resourceVersion')}",
            )

    def delete_collection(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        options: Obj | None = None,
    ) -> list[Obj]:
        with self.lock:
            page = self.list_page(
                resource, namespace, label_selector=label_selector, field_selector=field_selector
            )
            deleted = []
            for obj in page.items:
                namespace_of, name = _where(obj)
                if self.storage.get(resource, namespace_of, name) is not None:
                    deleted.append(self.delete(resource, namespace_of, name, options)[1])
            return deleted

    # --- dependents (the garbage collector's moves) ---------------------------------------

    def delete_dependents(self, owner_uid: str, policy: str = "Background") -> None:
        """Delete every dependent of `owner_uid` whose owners are all gone or going."""
        for key, namespace, name in sorted(self.storage.dependents.get(owner_uid, ())):
            resource = BY_KEY[key]
            obj = self.storage.get(resource, namespace, name)
            if obj is None or obj["metadata"].get("deletionTimestamp"):
                continue
            alive = [
                ref
                for ref in obj["metadata"].get("ownerReferences") or []
                if ref.get("uid") != owner_uid and self._owner_alive(str(ref.get("uid")))
            ]
            if alive:  # other owners remain: only the dangling reference goes
                changed = clone(obj)
                changed["metadata"]["ownerReferences"] = alive
                self.storage.put(resource, changed)
                continue
            self.delete(resource, namespace, name, {"propagationPolicy": policy})

    def _owner_alive(self, uid: str) -> bool:
        owner = self.storage.find(uid)
        return owner is not None and not owner["metadata"].get("deletionTimestamp")

    def _orphan_dependents(self, owner_uid: str) -> None:
        for key, namespace, name in sorted(self.storage.dependents.get(owner_uid, ())):
            resource = BY_KEY[key]
            obj = clone(self.storage.get(resource, namespace, name))
            refs = [
                r for r in obj["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid
            ]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)
            self.storage.put(resource, obj)

    def finish_foreground(self, owner_uid: str) -> None:
        """Remove the foregroundDeletion finalizer once no dependent blocks the owner."""
        owner = self.storage.find(owner_uid)
        if owner is None or FOREGROUND not in (owner["metadata"].get("finalizers") or []):
            return
        for key, namespace, name in self.storage.dependents.get(owner_uid, ()):
            dependent = self.storage.get(BY_KEY[key], namespace, name)
            refs = (dependent or {}).get("metadata", {}).get("ownerReferences") or []
            if any(r.get("uid") == owner_uid and r.get("blockOwnerDeletion") for r in refs):
                return
        resource, _, _ = self.storage.by_uid[owner_uid]
        self.remove_finalizer(resource, owner, FOREGROUND)

    def _terminate_namespace(self, space: Obj) -> Obj:
        """The namespace turns Terminating, its content is deleted, and it goes once empty."""
        obj = clone(space)
        obj["metadata"]["deletionTimestamp"] = rfc3339(self.now())
        obj["metadata"]["deletionGracePeriodSeconds"] = 0
        obj["status"] = {"phase": "Terminating"}
        self.storage.put(core("namespaces"), obj)
        name = obj["metadata"]["name"]
        for resource in STORED:
            if resource.namespaced:
                for item in self.storage.items(resource, name):
                    if not item["metadata"].get("deletionTimestamp"):
                        self.delete(resource, name, item["metadata"]["name"])
        return self.finish_namespace(name) or obj

    def finish_namespace(self, name: str) -> Obj | None:
        """Remove a terminating namespace that has no content left; the removed object."""
        space = self.storage.get(core("namespaces"), "", name)
        if space is None or not space["metadata"].get("deletionTimestamp"):
            return None
        if any(self.storage.count(r, name) for r in STORED if r.namespaced):
            return None
        return self.storage.remove(core("namespaces"), "", name).obj

    def remove_finalizer(self, resource: Resource, obj: Obj, finalizer: str) -> None:
        changed = clone(obj)
        left = [f for f in changed["metadata"].get("finalizers") or [] if f != finalizer]
        changed["metadata"]["finalizers"] = left
        if not left:
            changed["metadata"].pop("finalizers")
        self.write(resource, changed)


def decode(resource: Resource, body: Any) -> Obj:
    """A request body as a fresh object of `resource`'s kind (400 for anything else)."""
    if not isinstance(body, dict):
        raise errors.bad_request(f"the body must be a {resource.kind} object")
    obj = clone(body)
    kind = obj.get("kind")
    if kind not in (None, "", resource.kind):
        raise errors.bad_request(
            f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
        )
    version = obj.get("apiVersion")
    served = {resource.api_version(v) for v in resource.versions}
    if version not in (None, "", *served):
        raise errors.bad_request(
            f"the API version in the data ({version}) does not match the expected API version "
            f"({resource.api_version()})"
        )
    obj["apiVersion"], obj["kind"] = resource.api_version(), resource.kind
    if not isinstance(obj.get("metadata") or {}, dict):
        raise errors.bad_request("metadata must be an object")
    obj["metadata"] = obj.get("metadata") or {}
    view = view_for(resource.key)
    return view.into(obj) if view else obj


def _spec_of(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _where(obj: Obj) -> tuple[str, str]:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def _propagation(options: Obj, default: str) -> str:
    policy = options.get("propagationPolicy")
    if policy is None and options.get("orphanDependents") is not None:
        policy = "Orphan" if options["orphanDependents"] else "Background"
    policy = policy or default
    if policy not in ("Background", "Foreground", "Orphan"):
        raise errors.bad_request(
            f'propagationPolicy: Unsupported value: "{policy}": supported values: "Foreground", '
            '"Background", "Orphan"'
        )
    return str(policy)
