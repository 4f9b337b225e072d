"""Watch streams with the API server's semantics (k8s.io/apiserver cacher):

- from a resourceVersion: every change after it; one older than the history is a single ERROR
  event carrying a 410 Expired Status;
- without one (or "0"): ADDED events for the objects that exist now, then the changes;
- label and field selectors filter by the object before and after each change: an object that
  starts matching arrives as ADDED, one that stops matching as DELETED carrying its previous
  content with the change's resourceVersion;
- BOOKMARK events (allowWatchBookmarks) about once a minute and when the watch times out, with
  the newest resourceVersion the watcher has been brought up to; with sendInitialEvents, the
  bookmark that ends the initial events carries the `k8s.io/initial-events-end` annotation.

The stream ends after timeoutSeconds (default 30 minutes), or earlier after `linger_s` when the
server is set to cut watches short for tests and lock-step experiments (no bookmark then).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sim.kubernetes import errors, selectors
from sim.kubernetes.resources import Resource
from sim.kubernetes.store import ADDED, DELETED, MODIFIED, Change, Storage

Obj = dict[str, Any]
DEFAULT_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class WatchRequest:
    resource: Resource
    api_version: str
    namespace: str | None
    labels: selectors.LabelSelector
    fields: tuple[selectors.FieldTerm, ...]
    since: int | None  # None: start with the current objects
    timeout_s: float = DEFAULT_TIMEOUT_S
    bookmarks: bool = False
    initial_events_end: bool = False
    render: Callable[[Obj], Obj] | None = None  # a stored object as this watch serves it
    render_key: str = ""  # watches with the same key render alike (and share encoded lines)

    def passes(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels") or {}) and selectors.fields_match(
            self.fields, obj
        )


def event_for(request: WatchRequest, change: Change) -> bytes | None:
    now = change.type != DELETED and request.passes(change.obj)
    before = request.passes(change.previous)

    def line(kind: str, obj: Obj, variant: str = "") -> bytes:
        return change.line(
            kind,
            obj,
            request.api_version,
            variant=variant,
            render=request.render,
            shape=request.render_key,
        )

    if now:
        return line(MODIFIED if before else ADDED, change.obj)
    if not before:
        return None
    if change.type == DELETED:
        return line(DELETED, change.obj)
    assert change.previous is not None
    left = {**change.previous, "metadata": dict(change.previous["metadata"])}
    left["metadata"]["resourceVersion"] = str(change.revision)
    return line(DELETED, left, "left the selector")


def _line(kind: str, obj: Obj) -> bytes:
    return (json.dumps({"type": kind, "object": obj}) + "\n").encode()


def stream(
    storage: Storage,
    request: WatchRequest,
    write: Callable[[bytes], None],
    *,
    linger_s: float | None = None,
    bookmark_interval_s: float = 60.0,
    stopping: Callable[[], bool] = lambda: False,
) -> None:
    started = time.monotonic()
    deadline = started + request.timeout_s
    cut_short = linger_s is not None and started + linger_s < deadline
    if linger_s is not None:
        deadline = min(deadline, started + linger_s)
    with storage.lock:
        if request.since is None:
            cursor = storage.revision
            initial = [
                o for o in storage.items(request.resource, request.namespace) if request.passes(o)
            ]
        else:
            cursor, initial = request.since, []
    for obj in initial:
        served = request.render(obj) if request.render else _served(obj, request.api_version)
        write(_line(ADDED, served))
    if request.initial_events_end and request.bookmarks:
        write(_bookmark(request, cursor, initial_end=True))
    next_bookmark = started + bookmark_interval_s
    while True:
        try:
            with storage.lock:
                changes = storage.changes_since(request.resource, cursor)
                horizon = storage.revision
        except errors.ApiError as exc:
            write(_line("ERROR", exc.status()))
            return
        for change in changes:
            line = event_for(request, change)
            if line is not None:
                write(line)
        cursor = max(cursor, horizon)
        now = time.monotonic()
        if stopping() or now >= deadline:
            break
        if request.bookmarks and now >= next_bookmark:
            write(_bookmark(request, cursor))
            next_bookmark = now + bookmark_interval_s
        storage.wait(request.resource, cursor, min(deadline, next_bookmark) - now)
    if request.bookmarks and not cut_short and not stopping():
        write(_bookmark(request, cursor))


def _served(obj: Obj, api_version: str) -> Obj:
    return obj if obj.get("apiVersion") == api_version else {**obj, "apiVersion": api_version}


def _bookmark(request: WatchRequest, revision: int, *, initial_end: bool = False) -> bytes:
    meta: Obj = {"resourceVersion": str(revision)}
    if initial_end:
        meta["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": request.resource.kind, "apiVersion": request.api_version, "metadata": meta}
    return _line("BOOKMARK", obj)
