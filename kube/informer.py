"""Cluster state from the API server: list + watch, the way client-go's reflector keeps a cache.

An `Informer` lists a resource (page by page, one consistent snapshot) to learn every object and
the collection's resourceVersion, then watches from that version; each event moves the version on,
so a broken watch resumes exactly where it stopped. A `410 Gone` (the version was compacted away,
as an ERROR event in the stream or as the status of a paged list) means: list again. Changes are
kept as a map key -> (newest object, deleted?) until the owner drains them, so a burst of
updates to one pod costs one database write.

`step()` does one list or one watch round and returns; `run()` repeats it on a thread. Tests call
`step()` directly.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import watch
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from kube import nrt
from kube.nrt import NrtInfo
from kube.translate import parse_nrt

logger = logging.getLogger(__name__)

Object = dict[str, Any]
Change = tuple[Object, bool]  # the newest object, and whether it is gone
GONE = 410


def object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


class Informer:
    def __init__(
        self,
        name: str,
        list_func: Callable[..., Any],
        *,
        field_selector: str | None = None,
        read_func: Callable[[str, str], Object | None] | None = None,
        page_size: int = 500,
        watch_timeout_s: int = 300,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.name = name
        self.list_func = list_func
        self.field_selector = field_selector
        self.read_func = read_func
        self.page_size = page_size
        self.watch_timeout_s = watch_timeout_s
        self.request_timeout_s = request_timeout_s
        self.items: dict[str, Object] = {}
        self.resource_version: str | None = None
        self.lists = 0
        self.watches = 0
        self.expired = 0  # 410 Gone answers that forced a relist
        self.synced = threading.Event()  # set after the first complete list
        self._changes: dict[str, Change] = {}
        self._lock = threading.Lock()
        self._watch: watch.Watch | None = None

    # --- one round --------------------------------------------------------------------------

    def step(self) -> None:
        if self.resource_version is None:
            self._list()
        else:
            self._watch_once()

    def _selector(self) -> dict[str, Any]:
        return {"field_selector": self.field_selector} if self.field_selector else {}

    def _list(self) -> None:
        items: dict[str, Object] = {}
        token: str | None = None
        version = ""
        while True:
            kwargs = {**self._selector(), "limit": self.page_size}
            if token:
                kwargs["_continue"] = token
            try:
                response = self.list_func(
                    **kwargs, _preload_content=False, _request_timeout=self.request_timeout_s
                )
            except ApiException as exc:
                if exc.status == GONE and token:  # the continue token expired: start over
                    self.expired += 1
                    items, token = {}, None
                    continue
                raise
            doc = json.loads(response.data)
            for obj in doc.get("items") or []:
                items[object_key(obj)] = obj
            meta = doc.get("metadata") or {}
            version = str(meta.get("resourceVersion") or version)
            token = meta.get("continue") or None
            if not token:
                break
        gone = {key: self._final_state(self.items[key]) for key in self.items.keys() - items.keys()}
        with self._lock:
            for key, obj in gone.items():
                self._changes[key] = (obj, True)
            for key, obj in items.items():
                if self.items.get(key) != obj:
                    self._changes[key] = (obj, False)
            self.items = items
            self.resource_version = version
        self.lists += 1
        self.synced.set()
        logger.debug("%s: listed %d at resourceVersion %s", self.name, len(items), version)

    def _watch_once(self) -> None:
        self._watch = watch.Watch()
        self.watches += 1
        try:
            for event in self._watch.stream(
                # Without a return type to find on it, the client hands each event over as the
                # JSON it parsed (`raw_object`, all this reads) rather than also building the
                # object's model classes from it: most of a watch's CPU time.
                lambda *args, **kwargs: self.list_func(*args, **kwargs),
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s,
                _request_timeout=self.watch_timeout_s + self.request_timeout_s,
                **self._selector(),
            ):
                self._apply(event["type"], event["raw_object"])
        except ApiException as exc:
            if exc.status != GONE:
                raise
            logger.info("%s: resourceVersion %s expired, listing again", self.name, exc.reason)
            self.expired += 1
            self.resource_version = None
        finally:
            self._watch = None

    def _apply(self, kind: str, obj: Object) -> None:
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if version:
                self.resource_version = str(version)
            return
        key = object_key(obj)
        if kind == "DELETED":
            obj = self._final_state(obj)
        with self._lock:
            if kind == "DELETED":
                self.items.pop(key, None)
                self._changes[key] = (obj, True)
            else:  # ADDED | MODIFIED
                self.items[key] = obj
                self._changes[key] = (obj, False)
            if version:
                self.resource_version = str(version)

    def _final_state(self, obj: Object) -> Object:
        """An object that leaves the field selector arrives as DELETED with its *previous*
        content (the API server's watch cache does so), or is missing from the next list; read
        what it became, if it still exists, so a pod that finished is seen Succeeded rather than
        deleted while Running."""
        read = self.read_func
        if not self.field_selector or read is None:
            return obj
        meta = obj.get("metadata") or {}
        try:
            current = read(str(meta.get("namespace") or ""), str(meta.get("name")))
        except ApiException as exc:
            logger.info(
                "%s: reading %s after it left the selector: %s",
                self.name,
                meta.get("name"),
                exc.status,
            )
            return obj
        if current is None or (current.get("metadata") or {}).get("uid") != meta.get("uid"):
            return obj
        return current

    # --- consumers ----------------------------------------------------------------------------

    def drain(self) -> dict[str, Change]:
        """Every object changed since the last drain: key -> (newest object, deleted?)."""
        with self._lock:
            changes, self._changes = self._changes, {}
        return changes

    def snapshot(self) -> dict[str, Object]:
        with self._lock:
            return dict(self.items)

    # --- background ---------------------------------------------------------------------------

    def run(
        self, stop: threading.Event, *, backoff_s: float = 1.0, max_backoff_s: float = 30.0
    ) -> None:
        delay = backoff_s
        while not stop.is_set():
            try:
                self.step()
                delay = backoff_s
            except Exception as exc:  # the API server away, a proxy hiccup: retry with backoff
                logger.warning("%s: %s; retrying in %.0fs", self.name, exc, delay)
                stop.wait(delay)
                delay = min(max_backoff_s, delay * 2)

    def stop(self) -> None:
        current = self._watch
        if current is not None:
            current.stop()


class NrtSource:
    """NodeResourceTopology objects by node name, listed every `interval_s` (NFD rewrites them on
    every pod change, so a periodic list is cheaper than a watch). v1alpha2 first, v1alpha1 if the
    cluster serves only that; none at all (the CRD absent) is fine."""

    def __init__(
        self,
        api: CustomObjectsApi,
        *,
        interval_s: float = 30.0,
        monotonic: Callable[[], float] = time.monotonic,
        request_timeout_s: float = 30.0,
    ) -> None:
        self.api = api
        self.interval_s = interval_s
        self.monotonic = monotonic
        self.request_timeout_s = request_timeout_s
        self.version: str | None = None  # the version that answered
        self.by_node: dict[str, NrtInfo] = {}
        self._listed_at: float | None = None

    def due(self) -> bool:
        return self._listed_at is None or self.monotonic() - self._listed_at >= self.interval_s

    def refresh(self) -> bool:
        """List again when due; True when anything changed."""
        if not self.due():
            return False
        self._listed_at = self.monotonic()
        for version in nrt.VERSIONS:
            try:
                response: Any = self.api.list_cluster_custom_object(
                    nrt.GROUP,
                    version,
                    nrt.PLURAL,
                    _preload_content=False,
                    _request_timeout=self.request_timeout_s,
                )
            except ApiException as exc:
                if exc.status == 404:  # this version (or the CRD) is not served
                    continue
                logger.warning("NodeResourceTopology %s: %s", version, exc.status)
                return False
            doc = json.loads(response.data)
            found = {}
            for item in doc.get("items") or []:
                info = parse_nrt(item)
                name = (item.get("metadata") or {}).get("name")
                if info is not None and name:
                    found[str(name)] = info
            changed = found != self.by_node or version != self.version
            self.by_node, self.version = found, version
            return changed
        changed = bool(self.by_node)
        self.by_node, self.version = {}, None
        return changed


class PeriodicList:
    """A collection that changes rarely and is read whole (pod groups, disruption budgets,
    priority classes): listed every `interval_s` rather than watched. A collection the cluster
    does not serve (its CRD not installed: 404) is simply empty."""

    def __init__(
        self,
        name: str,
        list_func: Callable[..., Any],
        *,
        interval_s: float = 5.0,
        monotonic: Callable[[], float] = time.monotonic,
        request_timeout_s: float = 10.0,
    ) -> None:
        self.name = name
        self.list_func = list_func
        self.interval_s = interval_s
        self.monotonic = monotonic
        self.request_timeout_s = request_timeout_s
        self.items: dict[str, Object] = {}
        self.served = False
        self._listed_at: float | None = None

    def refresh(self, *, force: bool = False) -> bool:
        """List again when due (or forced); True when anything changed. A failed list keeps the
        last view and is tried again next time."""
        recent = self._listed_at is not None and (
            self.monotonic() - self._listed_at < self.interval_s
        )
        if recent and not force:
            return False
        self._listed_at = self.monotonic()
        try:
            response = self.list_func(
                _preload_content=False, _request_timeout=self.request_timeout_s
            )
        except ApiException as exc:
            if exc.status != 404:
                logger.warning("%s: list failed: %s", self.name, exc.status)
                return False
            changed, self.items, self.served = bool(self.items), {}, False
            return changed
        doc = json.loads(response.data)
        items = {object_key(obj): obj for obj in doc.get("items") or []}
        changed = items != self.items
        self.items, self.served = items, True
        return changed
