"""The agent's own endpoint: /healthz (steps keep coming), /readyz (the last probe and write
succeeded; 503 with the error otherwise) and /metrics (Prometheus text), on one port."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from kube.agent.agent import Health


def serve(health: Health, registry: CollectorRegistry, host: str, port: int) -> ThreadingHTTPServer:
    """Start serving on a daemon thread; the caller shuts the server down."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would flood the log

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._send(200, generate_latest(registry), CONTENT_TYPE_LATEST)
            elif path in ("/healthz", "/readyz"):
                ok, detail = health.live() if path == "/healthz" else health.ready()
                body = json.dumps({"status": "ok" if ok else "failing", **detail}).encode()
                self._send(200 if ok else 503, body, "application/json")
            else:
                self._send(404, b"not found\n", "text/plain")

        def _send(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="agent-http", daemon=True).start()
    return server
