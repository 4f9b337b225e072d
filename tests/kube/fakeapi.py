"""A loopback stand-in for the Kubernetes API server: the paths, JSON shapes, resourceVersions,
watch streams and error bodies gpusched uses, served by stdlib http.server on 127.0.0.1:0.

- Collections (nodes, pods) list with `limit`/`continue` paging and a collection resourceVersion;
  `?watch=true` streams `{"type","object"}` lines (chunked) of every change after the asked
  version, with field selectors applied the API server's way (an object that stops matching
  arrives as DELETED). A version older than the compaction point gets the 410 `Expired` ERROR
  event the real server sends.
- pods/binding: 201 `Status` on success (annotations of the Binding copied onto the pod), 409 when
  the pod is already bound, gated, or not the uid the Binding names, 404 when it does not exist.
- pods/status: strategic-merge patch only (conditions merged by `type`; times checked as
  metav1.Time).
- nodes/{name}: GET, and PATCH of metadata labels / annotations (strategic-merge or merge patch).
- events.k8s.io/v1: required fields and MicroTime (exactly 6 fractional digits and a zone)
  checked like the API server; 422 `Invalid` otherwise.
- coordination.k8s.io/v1 leases: get / create (409 AlreadyExists) / replace (409 Conflict on a
  stale resourceVersion), MicroTime checked.
- topology.node.k8s.io NodeResourceTopology lists for the versions it serves, 404 for others.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")

Obj = dict[str, Any]


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details or {}

    def status(self) -> Obj:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "details": self.details,
            "code": self.code,
        }


def _selector_matches(selector: str, obj: Obj) -> bool:
    for term in filter(None, (selector or "").split(",")):
        negate = "!=" in term
        field, value = term.split("!=" if negate else "=", 1)
        current: Any = obj
        for part in field.split("."):
            current = current.get(part) if isinstance(current, dict) else None
        current = "" if current is None else str(current)
        if (current == value) == negate:
            return False
    return True


class FakeKube:
    def __init__(self, *, linger_s: float = 0.05, nrt_versions: tuple[str, ...] = ("v1alpha2",)):
        self.lock = threading.Condition()
        self.linger_s = linger_s
        self.revision = 1000
        self.compacted = 0
        self.collections: dict[str, dict[str, Obj]] = {"nodes": {}, "pods": {}}
        # (revision, collection, type, object, previous object)
        self.history: list[tuple[int, str, str, Obj, Obj | None]] = []
        self.leases: dict[str, Obj] = {}
        self.events: list[Obj] = []
        self.event_rejections: list[Obj] = []
        self.bindings: list[Obj] = []
        self.status_patches: list[tuple[str, str, Obj]] = []
        self.node_patches: list[tuple[str, Obj]] = []
        self.requests: list[tuple[str, str]] = []
        self.nrt_versions = nrt_versions
        self.nrt: dict[str, Obj] = {}
        self.on_binding: Callable[[str, str], None] | None = None
        self._pages: dict[str, tuple[int, list[Obj]]] = {}
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    # --- lifecycle ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}"

    def start(self) -> FakeKube:
        self.thread.start()
        return self

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        return client.ApiClient(configuration)

    # --- state helpers for tests ----------------------------------------------------------------

    def _write(self, collection: str, key: str, obj: Obj | None, kind: str) -> Obj:
        with self.lock:
            previous = copy.deepcopy(self.collections[collection].get(key))
            self.revision += 1
            if obj is None:
                assert previous is not None
                gone = copy.deepcopy(previous)
                gone["metadata"]["resourceVersion"] = str(self.revision)
                del self.collections[collection][key]
                self.history.append((self.revision, collection, "DELETED", gone, previous))
                self.lock.notify_all()
                return gone
            obj["metadata"]["resourceVersion"] = str(self.revision)
            self.collections[collection][key] = obj
            self.history.append((self.revision, collection, kind, copy.deepcopy(obj), previous))
            self.lock.notify_all()
            return obj

    def add_node(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Node")
        obj["metadata"].setdefault("uid", str(uuid.uuid4()))
        return self._write("nodes", obj["metadata"]["name"], obj, "ADDED")

    def update_node(self, name: str, change: Callable[[Obj], None]) -> Obj:
        with self.lock:
            obj = copy.deepcopy(self.collections["nodes"][name])
            change(obj)
            return self._write("nodes", name, obj, "MODIFIED")

    def delete_node(self, name: str) -> None:
        self._write("nodes", name, None, "DELETED")

    def add_pod(self, obj: Obj) -> Obj:
        obj = copy.deepcopy(obj)
        obj.setdefault("apiVersion", "v1")
        obj.setdefault("kind", "Pod")
        meta = obj["metadata"]
        meta.setdefault("namespace", "default")
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", "2026-01-01T12:00:00Z")
        obj.setdefault("status", {"phase": "Pending"})
        obj["spec"].setdefault("schedulerName", "default-scheduler")
        return self._write("pods", f"{meta['namespace']}/{meta['name']}", obj, "ADDED")

    def pod(self, namespace: str, name: str) -> Obj:
        with self.lock:
            return copy.deepcopy(self.collections["pods"][f"{namespace}/{name}"])

    def update_pod(self, namespace: str, name: str, change: Callable[[Obj], None]) -> Obj:
        with self.lock:
            obj = copy.deepcopy(self.collections["pods"][f"{namespace}/{name}"])
            change(obj)
            return self._write("pods", f"{namespace}/{name}", obj, "MODIFIED")

    def delete_pod(self, namespace: str, name: str) -> None:
        self._write("pods", f"{namespace}/{name}", None, "DELETED")

    def compact(self) -> None:
        """Forget history: every watch from a version before now gets 410 Gone."""
        with self.lock:
            self.compacted = self.revision
            self.history = []

    def set_nrt(self, obj: Obj) -> None:
        with self.lock:
            self.revision += 1
            obj = copy.deepcopy(obj)
            obj["metadata"]["resourceVersion"] = str(self.revision)
            self.nrt[obj["metadata"]["name"]] = obj

    # --- request handling ---------------------------------------------------------------------

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _body(self) -> Any:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    return json.loads(raw) if raw else None
                except ValueError as exc:
                    raise ApiError(400, "BadRequest", f"invalid JSON: {exc}") from exc

            def _send(self, code: int, doc: Obj) -> None:
                data = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _dispatch(self, method: str) -> None:
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                with fake.lock:
                    fake.requests.append((method, self.path))
                try:
                    body = self._body() if method in ("POST", "PUT", "PATCH") else None
                    result = fake.route(method, parts.path, query, body, self.headers, self)
                except ApiError as exc:
                    self._send(exc.code, exc.status())
                    return
                if result is not None:
                    self._send(*result)

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def do_PUT(self) -> None:
                self._dispatch("PUT")

            def do_PATCH(self) -> None:
                self._dispatch("PATCH")

        return Handler

    def route(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        body: Any,
        headers: Any,
        handler: BaseHTTPRequestHandler,
    ) -> tuple[int, Obj] | None:
        segments = [s for s in path.split("/") if s]
        if method == "GET" and segments == ["api", "v1", "nodes"]:
            return self._collection("nodes", "NodeList", query, handler)
        if method == "GET" and segments == ["api", "v1", "pods"]:
            return self._collection("pods", "PodList", query, handler)
        if len(segments) == 4 and segments[:3] == ["api", "v1", "nodes"]:
            if method == "GET":
                return 200, self._get_node(segments[3])
            if method == "PATCH":
                return self._patch_node(segments[3], body, headers)
        if len(segments) >= 6 and segments[:3] == ["api", "v1", "namespaces"]:
            namespace, kind, name = segments[3], segments[4], segments[5]
            sub = segments[6] if len(segments) > 6 else ""
            if kind == "pods":
                if method == "GET" and not sub:
                    return 200, self._get_pod(namespace, name)
                if method == "POST" and sub == "binding":
                    return self._binding(namespace, name, body)
                if method == "PATCH" and sub == "status":
                    return self._patch_status(namespace, name, body, headers)
        if (
            segments[:4] == ["apis", "events.k8s.io", "v1", "namespaces"]
            and len(segments) == 6
            and method == "POST"
            and segments[5] == "events"
        ):
            return self._event(segments[4], body)
        if segments[:4] == ["apis", "coordination.k8s.io", "v1", "namespaces"]:
            return self._lease(method, segments[4:], body)
        if (
            len(segments) == 4
            and segments[:2] == ["apis", "topology.node.k8s.io"]
            and segments[3] == "noderesourcetopologies"
            and method == "GET"
            and segments[2] in self.nrt_versions
        ):
            with self.lock:
                items = [
                    {**copy.deepcopy(o), "apiVersion": f"topology.node.k8s.io/{segments[2]}"}
                    for o in self.nrt.values()
                ]
                return 200, {
                    "apiVersion": f"topology.node.k8s.io/{segments[2]}",
                    "kind": "NodeResourceTopologyList",
                    "metadata": {"resourceVersion": str(self.revision)},
                    "items": items,
                }
        raise ApiError(404, "NotFound", "the server could not find the requested resource")

    # --- lists and watches --------------------------------------------------------------------

    def _collection(
        self, collection: str, list_kind: str, query: dict[str, str], handler: Any
    ) -> tuple[int, Obj] | None:
        selector = query.get("fieldSelector", "")
        if query.get("watch", "").lower() in ("true", "1"):
            self._stream(collection, selector, query, handler)
            return None
        token = query.get("continue")
        limit = int(query.get("limit") or 0)
        with self.lock:
            if token:
                if token not in self._pages:
                    raise ApiError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent "
                        "list result. You can start a new list without the continue parameter.",
                    )
                revision, items = self._pages.pop(token)
            else:
                revision = self.revision
                items = [
                    copy.deepcopy(o)
                    for _, o in sorted(self.collections[collection].items())
                    if _selector_matches(selector, o)
                ]
            meta: Obj = {"resourceVersion": str(revision)}
            if limit and len(items) > limit:
                rest = base64.b64encode(uuid.uuid4().bytes).decode()
                self._pages[rest] = (revision, items[limit:])
                items = items[:limit]
                meta["continue"] = rest
        return 200, {"apiVersion": "v1", "kind": list_kind, "metadata": meta, "items": items}

    def _stream(self, collection: str, selector: str, query: dict[str, str], handler: Any) -> None:
        since = int(query.get("resourceVersion") or 0)
        timeout = float(query.get("timeoutSeconds") or 30)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        # The connection closes after the stream: say so, or the client pools it and its next
        # request (a POST, which urllib3 does not retry) meets a closed socket.
        handler.send_header("Connection", "close")
        handler.end_headers()

        def send(event: Obj) -> None:
            data = (json.dumps(event) + "\n").encode()
            handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            handler.wfile.flush()

        try:
            with self.lock:
                expired = since < self.compacted
            if expired:
                send(
                    {
                        "type": "ERROR",
                        "object": ApiError(
                            410,
                            "Expired",
                            f"too old resource version: {since} ({self.compacted})",
                        ).status(),
                    }
                )
            else:
                deadline = time.monotonic() + min(timeout, self.linger_s)
                cursor = since
                while True:
                    with self.lock:
                        pending = [h for h in self.history if h[0] > cursor and h[1] == collection]
                        if not pending:
                            left = deadline - time.monotonic()
                            if left <= 0:
                                break
                            self.lock.wait(left)
                            continue
                    for revision, _, kind, obj, previous in pending:
                        cursor = revision
                        event = self._filtered(kind, obj, previous, selector)
                        if event is not None:
                            send({"type": event, "object": obj})
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        handler.close_connection = True

    @staticmethod
    def _filtered(kind: str, obj: Obj, previous: Obj | None, selector: str) -> str | None:
        now = kind != "DELETED" and _selector_matches(selector, obj)
        before = previous is not None and _selector_matches(selector, previous)
        if kind == "DELETED":
            return "DELETED" if before else None
        if now and not before:
            return "ADDED"
        if now:
            return "MODIFIED"
        return "DELETED" if before else None

    # --- nodes ----------------------------------------------------------------------------------

    def _get_node(self, name: str) -> Obj:
        with self.lock:
            obj = self.collections["nodes"].get(name)
            if obj is None:
                raise ApiError(404, "NotFound", f'nodes "{name}" not found', {"name": name})
            return copy.deepcopy(obj)

    def _patch_node(self, name: str, body: Any, headers: Any) -> tuple[int, Obj]:
        """Strategic-merge or JSON merge patch of metadata (labels, annotations; null removes)."""
        content_type = headers.get("Content-Type", "")
        if content_type not in (
            "application/strategic-merge-patch+json",
            "application/merge-patch+json",
        ):
            raise ApiError(
                415, "UnsupportedMediaType", f"the media type {content_type!r} is not supported"
            )
        if not isinstance(body, dict) or set(body) - {"metadata"}:
            raise ApiError(422, "Invalid", "this API server patches node metadata only")
        with self.lock:
            node = self._get_node(name)
            for field in ("labels", "annotations"):
                changes = (body.get("metadata") or {}).get(field) or {}
                if not isinstance(changes, dict):
                    raise ApiError(400, "BadRequest", f"metadata.{field} must be an object")
                current = node["metadata"].setdefault(field, {})
                for key, value in changes.items():
                    if value is None:
                        current.pop(key, None)
                    elif not isinstance(value, str):
                        raise ApiError(422, "Invalid", f"metadata.{field}.{key}: must be a string")
                    else:
                        current[key] = value
            self.node_patches.append((name, copy.deepcopy(body)))
            return 200, self._write("nodes", name, node, "MODIFIED")

    # --- pods -----------------------------------------------------------------------------------

    def _get_pod(self, namespace: str, name: str) -> Obj:
        with self.lock:
            obj = self.collections["pods"].get(f"{namespace}/{name}")
            if obj is None:
                raise ApiError(
                    404,
                    "NotFound",
                    f'pods "{name}" not found',
                    {"name": name, "kind": "pods"},
                )
            return copy.deepcopy(obj)

    def _binding(self, namespace: str, name: str, body: Any) -> tuple[int, Obj]:
        if self.on_binding is not None:
            self.on_binding(namespace, name)
        if not isinstance(body, dict) or body.get("kind", "Binding") != "Binding":
            raise ApiError(400, "BadRequest", "the body must be a Binding")
        target = body.get("target") or {}
        if target.get("kind", "Node") != "Node" or not target.get("name"):
            raise ApiError(
                422,
                "Invalid",
                f'Binding.core "{name}" is invalid: target.name: Required value',
            )
        with self.lock:
            pod = self._get_pod(namespace, name)
            meta = body.get("metadata") or {}
            conflict = None
            if meta.get("uid") and meta["uid"] != pod["metadata"]["uid"]:
                conflict = (
                    f"Precondition failed: UID in precondition: {meta['uid']}, "
                    f"UID in object meta: {pod['metadata']['uid']}"
                )
            elif pod["spec"].get("nodeName"):
                conflict = f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"'
            elif pod["spec"].get("schedulingGates"):
                conflict = f"pod {name} has non-empty .spec.schedulingGates"
            if conflict:
                raise ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on pods/binding "{name}": {conflict}',
                    {"name": name, "kind": "pods/binding"},
                )
            pod["spec"]["nodeName"] = target["name"]
            if meta.get("annotations"):
                pod["metadata"].setdefault("annotations", {}).update(meta["annotations"])
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions[:] = [c for c in conditions if c.get("type") != "PodScheduled"]
            conditions.append(
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}
            )
            self._write("pods", f"{namespace}/{name}", pod, "MODIFIED")
            self.bindings.append(copy.deepcopy(body))
        return 201, {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    def _patch_status(self, namespace: str, name: str, body: Any, headers: Any) -> tuple[int, Obj]:
        content_type = headers.get("Content-Type", "")
        if content_type != "application/strategic-merge-patch+json":
            raise ApiError(
                415, "UnsupportedMediaType", f"the media type {content_type!r} is not supported"
            )
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "a strategic merge patch must be an object")
        with self.lock:
            pod = self._get_pod(namespace, name)
            for condition in (body.get("status") or {}).get("conditions") or []:
                problems = []
                if condition.get("status") not in ("True", "False", "Unknown"):
                    problems.append("status: Unsupported value")
                for key in ("lastTransitionTime", "lastProbeTime"):
                    value = condition.get(key)
                    if value is not None and not TIME.match(str(value)):
                        problems.append(f"{key}: {value!r} is not RFC 3339")
                if not condition.get("type"):
                    problems.append("type: Required value")
                if problems:
                    raise ApiError(422, "Invalid", f"Pod {name!r} is invalid: {problems}")
                conditions = pod.setdefault("status", {}).setdefault("conditions", [])
                for existing in conditions:
                    if existing.get("type") == condition["type"]:
                        existing.update(condition)
                        break
                else:
                    conditions.append(dict(condition))
            self.status_patches.append((namespace, name, copy.deepcopy(body)))
            return 200, self._write("pods", f"{namespace}/{name}", pod, "MODIFIED")

    # --- events ---------------------------------------------------------------------------------

    def _event(self, namespace: str, body: Any) -> tuple[int, Obj]:
        problems = []
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be an Event")
        if body.get("apiVersion") != "events.k8s.io/v1" or body.get("kind") != "Event":
            problems.append("apiVersion/kind: must be events.k8s.io/v1 Event")
        event_time = body.get("eventTime")
        if not isinstance(event_time, str) or not MICRO_TIME.match(event_time):
            problems.append(
                f'eventTime: Invalid value: "{event_time}": parsing time as '
                '"2006-01-02T15:04:05.000000Z07:00"'
            )
        for key, limit in (
            ("reportingController", 253),
            ("reportingInstance", 128),
            ("action", 128),
            ("reason", 128),
        ):
            if not body.get(key):
                problems.append(f"{key}: Required value")
            elif len(str(body[key])) > limit:
                problems.append(f"{key}: Too long: may not be longer than {limit}")
        if body.get("type") not in ("Normal", "Warning"):
            problems.append(f"type: Unsupported value: {body.get('type')!r}")
        regarding = body.get("regarding") or {}
        if regarding.get("namespace", namespace) != namespace:
            problems.append("regarding.namespace: does not match event.namespace")
        if len(str(body.get("note", "")).encode()) > 1024:
            problems.append("note: Too long: may not be longer than 1024")
        meta = body.get("metadata") or {}
        if not meta.get("name") and not meta.get("generateName"):
            problems.append("metadata.name: Required value")
        if problems:
            with self.lock:
                self.event_rejections.append(body)
            raise ApiError(422, "Invalid", f"Event is invalid: {'; '.join(problems)}")
        with self.lock:
            self.revision += 1
            stored = copy.deepcopy(body)
            stored["metadata"] = {
                **meta,
                "namespace": namespace,
                "name": meta.get("name") or meta["generateName"] + uuid.uuid4().hex[:10],
                "uid": str(uuid.uuid4()),
                "resourceVersion": str(self.revision),
            }
            self.events.append(stored)
            return 201, stored

    # --- leases ---------------------------------------------------------------------------------

    def _lease(self, method: str, rest: list[str], body: Any) -> tuple[int, Obj]:
        if len(rest) < 2 or rest[1] != "leases":
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace = rest[0]
        with self.lock:
            if method == "POST" and len(rest) == 2:
                lease = self._valid_lease(body)
                key = f"{namespace}/{lease['metadata']['name']}"
                if key in self.leases:
                    raise ApiError(
                        409,
                        "AlreadyExists",
                        f'leases.coordination.k8s.io "{lease["metadata"]["name"]}" already exists',
                    )
                return 201, self._store_lease(key, namespace, lease)
            if len(rest) != 3:
                raise ApiError(405, "MethodNotAllowed", "method not allowed")
            key = f"{namespace}/{rest[2]}"
            current = self.leases.get(key)
            if current is None:
                raise ApiError(
                    404,
                    "NotFound",
                    f'leases.coordination.k8s.io "{rest[2]}" not found',
                    {"name": rest[2], "group": "coordination.k8s.io", "kind": "leases"},
                )
            if method == "GET":
                return 200, copy.deepcopy(current)
            if method == "PUT":
                lease = self._valid_lease(body)
                version = (lease.get("metadata") or {}).get("resourceVersion")
                if version and version != current["metadata"]["resourceVersion"]:
                    raise ApiError(
                        409,
                        "Conflict",
                        f'Operation cannot be fulfilled on leases.coordination.k8s.io "{rest[2]}":'
                        " the object has been modified; please apply your changes to the latest"
                        " version and try again",
                    )
                lease["metadata"]["uid"] = current["metadata"]["uid"]
                return 200, self._store_lease(key, namespace, lease)
        raise ApiError(405, "MethodNotAllowed", "method not allowed")

    @staticmethod
    def _valid_lease(body: Any) -> Obj:
        if not isinstance(body, dict) or body.get("kind", "Lease") != "Lease":
            raise ApiError(400, "BadRequest", "the body must be a Lease")
        for key in ("acquireTime", "renewTime"):
            value = (body.get("spec") or {}).get(key)
            if value is not None and not MICRO_TIME.match(str(value)):
                raise ApiError(
                    400,
                    "BadRequest",
                    f'Lease in version "v1" cannot be handled as a Lease: parsing time "{value}" '
                    'as "2006-01-02T15:04:05.000000Z07:00": cannot parse',
                )
        return copy.deepcopy(body)

    def _store_lease(self, key: str, namespace: str, lease: Obj) -> Obj:
        self.revision += 1
        lease.setdefault("apiVersion", "coordination.k8s.io/v1")
        lease.setdefault("kind", "Lease")
        lease["metadata"]["namespace"] = namespace
        lease["metadata"].setdefault("uid", str(uuid.uuid4()))
        lease["metadata"]["resourceVersion"] = str(self.revision)
        self.leases[key] = lease
        return copy.deepcopy(lease)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
