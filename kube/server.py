"""A lean HTTP server for the extender alone (`manage.py runextender`): kube-scheduler calls it on
its critical path, so the request goes straight to the extender, without the web process's ASGI
stack and middleware, over keep-alive HTTP/1.1 connections with TCP_NODELAY.

    POST /extender/filter | /extender/prioritize | /extender/bind   (extender v1 JSON)
    GET  /healthz                                                    (200 "ok", for probes)

Served over TLS (kube/extender_auth.py): the handshake runs in the connection's own thread, so a
client that stalls it holds only its thread, for at most HANDSHAKE_TIMEOUT_S. Every verb needs a
client certificate signed by the client CA or a bearer token; anyone else gets a 401 and nothing
is read from the database. Bodies are bounded (MAX_BODY) and decoded with bounded nesting
(common/jsonbody.py); an idle keep-alive connection is closed after IDLE_TIMEOUT_S.
"""

from __future__ import annotations

import json
import logging
import socket
import ssl
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.db import close_old_connections, connection

from common import jsonbody
from kube import extender
from kube import metrics as extender_metrics
from kube.extender import ExtenderError
from kube.extender_auth import ExtenderAuth

logger = logging.getLogger(__name__)

MAX_BODY = 64 * 1024 * 1024  # 5,000 full v1.Node objects fit easily
HANDSHAKE_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 120.0  # kube-scheduler's connections idle between pods; Go drops them at 90 s


class ExtenderServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], *, auth: ExtenderAuth, tls: ssl.SSLContext | None
    ) -> None:
        super().__init__(address, ExtenderHandler)
        self.auth = auth
        self.tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        """In the connection's thread: the TLS handshake, then the requests. The TLS socket takes
        the connection over from `request`, so it is the one closed at the end."""
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            secure = self.tls.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        except OSError as exc:
            logger.info("extender: TLS with %s failed: %s", client_address[0], exc)
            return
        try:
            secure.do_handshake()
            super().finish_request(secure, client_address)
        except OSError as exc:  # ssl.SSLError included: a bad certificate, plain HTTP, a stall
            logger.info("extender: TLS with %s failed: %s", client_address[0], exc)
        finally:
            secure.close()


class ExtenderHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses its connections
    server_version = "gpusched-extender"
    timeout = IDLE_TIMEOUT_S
    server: ExtenderServer

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            connection.close()  # this thread's database connection ends with the client's

    def log_message(self, format: str, *args: Any) -> None:
        logger.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._reply(200, {"status": "ok"})
        else:
            self._reply(404, {"Error": f"no such path {self.path}"})

    def do_POST(self) -> None:
        authorization = self.headers.get("Authorization", "")
        refused = self.server.auth.admits(authorization, self._certificate())
        if refused:
            where = self.client_address[0]
            logger.warning("extender: refused %s from %s: %s", self.path, where, refused)
            extender_metrics.refused.inc()
            self._reply(401, {"Error": refused}, close=True)
            return
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._reply(413, {"Error": f"request body must be 0 to {MAX_BODY} bytes"}, close=True)
            return
        raw = self.rfile.read(length) if length else b""
        verb = self.path.removeprefix("/extender/")
        if verb not in extender_metrics.VERBS:
            self._reply(404, {"Error": f"no such extender verb {self.path}"})
            return
        started = time.perf_counter()
        status, body = self._answer(verb, raw)
        extender_metrics.record_request(verb, status, body, time.perf_counter() - started)
        self._reply(status, body)

    def _answer(self, verb: str, raw: bytes) -> tuple[int, object]:
        try:
            doc = jsonbody.loads(raw or b"null")
        except jsonbody.BodyError as exc:
            if verb == "filter":
                return 200, extender.filter_result(error=str(exc))
            return (400 if verb == "prioritize" else 200), {"Error": str(exc)}
        try:
            service = extender.get()
            if verb == "filter":
                return 200, service.filter(doc)
            if verb == "prioritize":
                return 200, service.prioritize(doc)
            return 200, service.bind(doc)
        except ExtenderError as exc:
            return 400, {"Error": str(exc)}
        except Exception as exc:  # the database away: say so, reconnect next time
            logger.exception("extender %s failed", verb)
            close_old_connections()
            return 503, {"Error": f"extender unavailable: {exc}"}

    def _certificate(self) -> dict[str, Any] | None:
        if isinstance(self.connection, ssl.SSLSocket):
            return self.connection.getpeercert() or None
        return None

    def _reply(self, status: int, body: object, *, close: bool = False) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)


def make_server(
    host: str, port: int, *, auth: ExtenderAuth, tls: ssl.SSLContext | None = None
) -> ExtenderServer:
    return ExtenderServer((host, port), auth=auth, tls=tls)
