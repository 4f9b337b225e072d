"""A lean HTTP server for the extender alone (`manage.py runextender`): kube-scheduler calls it on
its critical path, so the request goes straight to the extender, without the web process's ASGI
stack and middleware, over keep-alive HTTP/1.1 connections with TCP_NODELAY. The same endpoints
are also served by the web process (gpusched/urls.py) for small clusters.

    POST /extender/filter | /extender/prioritize | /extender/bind   (extender v1 JSON)
    GET  /healthz                                                    (200 "ok")
"""

from __future__ import annotations

import json
import logging
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from django.db import close_old_connections, connection

from kube import extender
from kube import metrics as extender_metrics
from kube.extender import ExtenderError

logger = logging.getLogger(__name__)

MAX_BODY = 64 * 1024 * 1024  # 5,000 full v1.Node objects fit easily


class ExtenderHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: kube-scheduler reuses its connections
    server_version = "gpusched-extender"

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
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            self._reply(413, {"Error": "request body too large"})
            self.close_connection = True
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
            doc = json.loads(raw or b"null")
        except (ValueError, UnicodeDecodeError) as exc:
            problem = f"request body is not JSON: {exc}"
            if verb == "filter":
                return 200, extender.filter_result(error=problem)
            return (400 if verb == "prioritize" else 200), {"Error": problem}
        service = extender.get()
        try:
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

    def _reply(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def make_server(host: str, port: int) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((host, port), ExtenderHandler)
    server.daemon_threads = True
    return server
