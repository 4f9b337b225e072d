"""The simulated API server's HTTP side: the API server's paths, query parameters, JSON bodies and
Status errors, on a threaded stdlib server bound to loopback.

    /healthz /readyz /livez /version /api /apis /apis/<g> /api/v1 /apis/<g>/<v>   (discovery)
    /api/v1/<plural>[/<name>[/<subresource>]]                  cluster-scoped, or all namespaces
    /api/v1/namespaces/<ns>/<plural>[/<name>[/<subresource>]]  namespaced
    /apis/<group>/<version>/...                                the same below a group

GET lists (or watches with `watch=true`), POST creates, PUT replaces, PATCH patches (merge,
strategic merge for built-in kinds, JSON patch), DELETE deletes (DeleteOptions from the query and
the body); POST on pods/binding binds, on pods/eviction evicts. `dryRun=All` writes nothing.
Bodies may be JSON, YAML or (built-in kinds) protobuf; answers are JSON, or the Table and
partial-metadata shapes kubectl asks for (sim/kubernetes/negotiation.py, tables.py). A resource
served in another shape than it is stored (core/v1 events) is converted on the way out.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes import client

from sim.kubernetes import binding, discovery, errors, eviction, negotiation, selectors, tables
from sim.kubernetes.errors import ApiError
from sim.kubernetes.kinds import rules_for, view_for
from sim.kubernetes.registry import Page, Registry
from sim.kubernetes.resources import TABLE, Resource, core, resource
from sim.kubernetes.watch import DEFAULT_TIMEOUT_S, WatchRequest, stream

logger = logging.getLogger(__name__)
Obj = dict[str, Any]
LOOPBACK = ("127.0.0.1", "::1", "localhost")
_TRUE = ("true", "1")
# What the API server warns when a delete leaves the propagation to a kind whose default orphans
# the dependents (batch/v1 Jobs: pkg/registry/batch/job/storage/storage.go).
ORPHAN_WARNING = (
    "child pods are preserved by default when jobs are deleted; set propagationPolicy=Background "
    "to remove them or set propagationPolicy=Orphan to suppress this warning"
)


class ApiServer:
    """The HTTP front of a Registry. `record=True` keeps what clients asked (requests, accepted
    Bindings, pods/status patches) for tests to assert on."""

    def __init__(
        self,
        registry: Registry,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        watch_linger_s: float | None = None,
        bookmark_interval_s: float = 60.0,
        record: bool = False,
    ) -> None:
        if host not in LOOPBACK:
            raise ValueError(f"the simulated API server listens on loopback only, not {host!r}")
        self.registry = registry
        self.watch_linger_s = watch_linger_s
        self.bookmark_interval_s = bookmark_interval_s
        self.record = record
        self.served: dict[str, tuple[str, ...]] = {r.key: r.versions for r in TABLE}
        self.requests: list[tuple[str, str]] = []
        self.bindings: list[Obj] = []
        self.status_patches: list[tuple[str, str, Obj]] = []
        self.on_binding: Callable[[str, str], None] | None = None
        self._clients: list[client.ApiClient] = []
        self._stopping = threading.Event()
        self._http = _Http((host, port), _Handler)
        self._http.api = self
        self._thread = threading.Thread(
            target=self._http.serve_forever, daemon=True, name="kube-apiserver"
        )

    @property
    def port(self) -> int:
        return int(self._http.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving, and close the clients api_client() made (their pooled sockets)."""
        self._stopping.set()
        self.registry.storage.wake_all()
        self._http.shutdown()
        self._http.server_close()
        for made in self._clients:
            made.close()

    def api_client(self) -> client.ApiClient:
        configuration = client.Configuration()
        configuration.host = self.url
        made = client.ApiClient(configuration)
        self._clients.append(made)
        return made

    # --- dispatch -------------------------------------------------------------------------

    def dispatch(self, handler: _Handler, method: str) -> None:
        parts = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        if self.record:
            with self.registry.lock:
                self.requests.append((method, handler.path))
        try:
            raw = _read(handler)
            result = self.route(method, parts.path, query, raw, handler)
        except ApiError as exc:
            handler.send_json(exc.code, exc.status())
            return
        except Exception:  # a bug here must not look like an answer from Kubernetes
            logger.exception("%s %s", method, handler.path)
            handler.send_json(500, errors.internal("internal error in the simulated API").status())
            return
        if result is not None:
            handler.send_json(*result)

    def route(
        self, method: str, path: str, query: dict[str, str], raw: bytes, handler: _Handler
    ) -> tuple[int, Obj] | None:
        segments = [s for s in path.split("/") if s]
        if segments in (["healthz"], ["readyz"], ["livez"]):
            handler.send_text(200, "ok")
            return None
        if segments == ["version"]:
            return 200, discovery.VERSION
        if segments[:2] == ["openapi", "v3"]:
            found_doc = discovery.openapi_v3("/".join(segments[2:]), self.served)
            if found_doc is None:
                handler.send_text(404, "404 page not found")
            return None if found_doc is None else (200, found_doc)
        if not segments or segments[0] not in ("api", "apis"):
            handler.send_text(404, "404 page not found")
            return None
        negotiation.check_accept(handler.headers.get("Accept"))
        if segments[0] == "api":
            group, rest = "", segments[1:]
            if not rest:
                return 200, discovery.api_versions(f"127.0.0.1:{self.port}")
        else:
            if len(segments) == 1:
                return 200, discovery.group_list()
            group, rest = segments[1], segments[2:]
            if not rest:
                found = discovery.group(group)
                if found is None:
                    raise errors.path_not_found()
                return 200, found
        version, rest = rest[0], rest[1:]
        if not rest:
            listing = discovery.resource_list(group, version, self.served)
            if listing is None:
                raise errors.path_not_found()
            return 200, listing
        return self._resource_route(method, group, version, rest, query, raw, handler)

    def _resource_route(
        self,
        method: str,
        group: str,
        version: str,
        rest: list[str],
        query: dict[str, str],
        raw: bytes,
        handler: _Handler,
    ) -> tuple[int, Obj] | None:
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3 and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise errors.path_not_found()
        plural, name = rest[0], rest[1] if len(rest) > 1 else ""
        sub = rest[2] if len(rest) > 2 else ""
        content_type = handler.headers.get("Content-Type")
        if group == "" and plural == "bindings" and namespace and method == "POST" and not name:
            body = negotiation.decode_body(raw, content_type, custom=False, patch=False)
            name = str(((body or {}).get("metadata") or {}).get("name") or "")
            return 201, self._bind(namespace, name, body)
        found = resource(group, plural)
        if found is None or version not in self.served[found.key]:
            raise errors.path_not_found()
        body = negotiation.decode_body(
            raw, content_type, custom=found.custom, patch=method == "PATCH"
        )
        if (namespace is not None) != found.namespaced and (name or method != "GET"):
            raise errors.path_not_found()
        if sub and sub not in found.subresources:
            raise errors.path_not_found()
        space = namespace or ""
        dry_run = query.get("dryRun") == "All"
        api = self.registry
        if not name:
            return self._collection(method, found, version, namespace, query, body, handler)
        if sub in ("binding", "eviction"):
            if method != "POST":
                raise errors.method_not_allowed()
            if sub == "binding":
                return 201, self._bind(space, name, body)
            return 201, eviction.evict(api, space, name, body)
        if method == "GET":
            served = _served(api.read(found, space, name), found, version)
            return 200, self._shaped(found, version, [served], handler, query, single=True)
        if method == "PUT":
            obj = api.replace(found, space, name, body, subresource=sub, dry_run=dry_run)
            return 200, _served(obj, found, version)
        if method == "PATCH":
            content_type = (handler.headers.get("Content-Type") or "").split(";")[0].strip()
            obj = api.patch(
                found, space, name, body, content_type, subresource=sub, dry_run=dry_run
            )
            if self.record and found is core("pods") and sub == "status":
                with api.lock:
                    self.status_patches.append((space, name, body))
            return 200, _served(obj, found, version)
        if method == "DELETE" and not sub:
            options = _delete_options(query, body)
            code, obj = api.delete(found, space, name, options)
            _warn_orphaning(found, options, handler)
            return code, _served(obj, found, version)
        raise errors.method_not_allowed()

    def _shaped(
        self,
        found: Resource,
        version: str,
        items: list[Obj],
        handler: _Handler,
        query: dict[str, str],
        *,
        single: bool = False,
        page: Page | None = None,
    ) -> Obj:
        """The answer in the shape the client asked for: the object or list as served, a Table,
        or partial metadata."""
        shape = negotiation.wanted_shape(handler.headers.get("Accept"))
        meta: Obj = {}
        if page is not None:
            meta["resourceVersion"] = str(page.revision)
            if page.continue_token:
                meta["continue"] = page.continue_token
            if page.remaining is not None:
                meta["remainingItemCount"] = page.remaining
        if shape == "Table":
            include = query.get("includeObject", "Metadata")
            return tables.table(found, items, self.registry.now(), meta, include)
        if shape == "PartialObjectMetadata" and single:
            return tables.partial(items[0])
        if shape == "PartialObjectMetadataList" and not single:
            return tables.partial_list(items, meta)
        if shape:
            raise errors.ApiError(
                406, "NotAcceptable", f"as={shape} is not available for this request"
            )
        if single:
            return items[0]
        return {"apiVersion": found.api_version(version), "kind": found.list_kind,
                "metadata": meta, "items": items}  # fmt: skip

    def _collection(
        self,
        method: str,
        found: Resource,
        version: str,
        namespace: str | None,
        query: dict[str, str],
        body: Any,
        handler: _Handler,
    ) -> tuple[int, Obj] | None:
        api = self.registry
        labels, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        if method == "GET" and query.get("watch", "").lower() in _TRUE:
            self._watch(found, version, namespace, query, handler)
            return None
        if method == "GET":
            page = api.list_page(
                found,
                namespace,
                label_selector=labels,
                field_selector=fields,
                limit=_int(query, "limit", 0),
                token=query.get("continue", ""),
            )
            items = [_served(o, found, version) for o in page.items]
            return 200, self._shaped(found, version, items, handler, query, page=page)
        if method == "POST":
            if namespace is None and found.namespaced:
                raise errors.method_not_allowed()
            obj = api.create(found, namespace or "", body, dry_run=query.get("dryRun") == "All")
            return 201, _served(obj, found, version)
        if method == "DELETE":
            options = _delete_options(query, body)
            deleted = api.delete_collection(
                found,
                namespace,
                label_selector=labels,
                field_selector=fields,
                options=options,
            )
            _warn_orphaning(found, options, handler)
            doc = {"apiVersion": found.api_version(version), "kind": found.list_kind}
            meta = {"resourceVersion": str(api.storage.revision)}
            items = [_served(o, found, version) for o in deleted]
            return 200, {**doc, "metadata": meta, "items": items}
        raise errors.method_not_allowed()

    def _bind(self, namespace: str, name: str, body: Any) -> Obj:
        if self.on_binding is not None:
            self.on_binding(namespace, name)
        status = binding.bind(self.registry, namespace, name, body)
        if self.record:
            with self.registry.lock:
                self.bindings.append(body)
        return status

    def _watch(
        self,
        found: Resource,
        version: str,
        namespace: str | None,
        query: dict[str, str],
        handler: _Handler,
    ) -> None:
        since_text = query.get("resourceVersion", "")
        try:
            since = int(since_text) if since_text not in ("", "0") else None
        except ValueError as exc:
            raise errors.bad_request(f"invalid resource version: {since_text}") from exc
        shape = negotiation.wanted_shape(handler.headers.get("Accept"))
        include = query.get("includeObject", "Metadata")

        def render(obj: Obj) -> Obj:
            served = _served(obj, found, version)
            if shape == "Table":
                meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                return tables.table(found, [served], self.registry.now(), meta, include)
            if shape == "PartialObjectMetadata":
                return tables.partial(served)
            return served

        request = WatchRequest(
            resource=found,
            api_version=found.api_version(version),
            render=render,
            render_key=f"{version}|{shape}|{include}",
            namespace=namespace,
            labels=selectors.parse_labels(query.get("labelSelector")),
            fields=selectors.parse_fields(query.get("fieldSelector"), found),
            since=since,
            timeout_s=float(_int(query, "timeoutSeconds", int(DEFAULT_TIMEOUT_S))),
            bookmarks=query.get("allowWatchBookmarks", "").lower() in _TRUE,
            initial_events_end=query.get("sendInitialEvents", "").lower() in _TRUE,
        )
        handler.start_chunked()
        try:
            stream(
                self.registry.storage,
                request,
                handler.write_chunk,
                linger_s=self.watch_linger_s,
                bookmark_interval_s=self.bookmark_interval_s,
                stopping=self._stopping.is_set,
            )
            handler.end_chunked()
        except (BrokenPipeError, ConnectionResetError):
            pass
        handler.close_connection = True


class _Http(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # many clients connecting at once (informers, benchmarks)
    api: ApiServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up (a watch stopped, a test finished) is not an error."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body leave in two writes; with Nagle's algorithm on, the body waits for the
    # client's delayed ACK of the headers (about 40 ms on Linux) on every keep-alive request.
    disable_nagle_algorithm = True
    server: _Http

    def log_message(self, format: str, *args: Any) -> None:
        return  # one line per request would drown everything else

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's names
        self.server.api.dispatch(self, "GET")

    def do_POST(self) -> None:  # noqa: N802
        self.server.api.dispatch(self, "POST")

    def do_PUT(self) -> None:  # noqa: N802
        self.server.api.dispatch(self, "PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self.server.api.dispatch(self, "PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self.server.api.dispatch(self, "DELETE")

    def parse_request(self) -> bool:
        self.warnings: list[str] = []  # Warning headers of this request's answer
        return super().parse_request()

    def send_json(self, code: int, doc: Obj) -> None:
        self._send(code, json.dumps(doc).encode(), "application/json")

    def send_text(self, code: int, text: str) -> None:
        self._send(code, text.encode(), "text/plain; charset=utf-8")

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        for warning in self.warnings:
            self.send_header("Warning", f'299 - "{warning}"')
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        # The connection ends with the watch: said up front, so no client puts it back in its
        # pool and sends its next request into a closed socket.
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def _read(handler: _Handler) -> bytes:
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""


def _warn_orphaning(found: Resource, options: Obj, handler: _Handler) -> None:
    if rules_for(found.key).default_propagation != "Orphan":
        return
    if options.get("propagationPolicy") is None and options.get("orphanDependents") is None:
        handler.warnings.append(ORPHAN_WARNING)


def _int(query: dict[str, str], key: str, default: int) -> int:
    text = query.get(key, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError as exc:
        raise errors.bad_request(f"{key}: invalid integer {text!r}") from exc


def _delete_options(query: dict[str, str], body: Any) -> Obj:
    options: Obj = {}
    if "gracePeriodSeconds" in query:
        options["gracePeriodSeconds"] = _int(query, "gracePeriodSeconds", 0)
    if "propagationPolicy" in query:
        options["propagationPolicy"] = query["propagationPolicy"]
    if "orphanDependents" in query:
        options["orphanDependents"] = query["orphanDependents"].lower() in _TRUE
    if isinstance(body, dict):
        options.update({k: v for k, v in body.items() if k not in ("kind", "apiVersion")})
    return options


def _served(obj: Obj, found: Resource, version: str) -> Obj:
    """A stored object as `found` serves it at `version` (Status bodies as they are)."""
    if obj.get("kind") == "Status":
        return obj
    view = view_for(found.key)
    if view is not None:
        obj = view.out(obj)
    api_version = found.api_version(version)
    return obj if obj.get("apiVersion") == api_version else {**obj, "apiVersion": api_version}
