"""Loopback HTTP servers for the telemetry tests: a dcgm-exporter, a faulty proxy, Prometheus."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import yaml

from telemetry.exposition import ExporterFlavor, GpuState, render_exposition

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def closed_port_url() -> str:
    """A loopback URL on which nothing listens (connections are refused)."""
    return f"http://127.0.0.1:{free_port()}"


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with _NO_PROXY.open(url, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def wait_for(check: Callable[[], Any], *, timeout: float, interval: float = 0.2) -> Any:
    """Poll `check` until it returns something truthy; that value, or AssertionError."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            result = check()
        except Exception:  # not up yet
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


class _Server:
    """A ThreadingHTTPServer on 127.0.0.1 that can be stopped and started again on its port."""

    def __init__(self, port: int = 0) -> None:
        self.port = port
        self.hits = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        raise NotImplementedError

    def start(self) -> Self:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits += 1
                with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                    owner.respond(self)  # (the client may have given up: a timeout test)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        httpd.daemon_threads = True
        self.port = int(httpd.server_address[1])
        self._httpd = httpd
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def send(handler: BaseHTTPRequestHandler, status: int, body: bytes, content_type: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


class FakeExporter(_Server):
    """Serves dcgm-exporter text on /metrics, rendered from GPU states at each scrape.

    `states` may be a function of the scrape number, for values that change between scrapes.
    `body` replaces the rendered text (malformed input); `delay` holds every answer back;
    `drip` sends the answer one byte every `drip` seconds (from the status line on, or, with
    `drip_body`, from the body on); `no_length` leaves Content-Length out (the body ends when
    the connection closes, as HTTP/1.0 servers and many proxies frame it).
    """

    def __init__(
        self,
        states: Sequence[GpuState] | Callable[[int], Sequence[GpuState]] = (),
        *,
        flavor: ExporterFlavor | None = None,
        port: int = 0,
    ) -> None:
        super().__init__(port)
        self.states = states
        self.flavor = flavor
        self.body: str | None = None
        self.status = 200
        self.delay = 0.0
        self.drip = 0.0
        self.drip_body = False
        self.no_length = False

    @property
    def url(self) -> str:
        return f"{self.base_url}/metrics"

    def text(self) -> str:
        if self.body is not None:
            return self.body
        states = self.states(self.hits) if callable(self.states) else self.states
        return render_exposition(states, flavor=self.flavor)

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        if handler.path != "/metrics":
            send(handler, 404, b"not found\n", "text/plain")
            return
        if self.delay:
            time.sleep(self.delay)
        content_type = "text/plain; version=0.0.4; charset=utf-8"
        body = self.text().encode()
        if self.drip:
            length = "" if self.no_length else f"Content-Length: {len(body)}\r\n"
            head = f"HTTP/1.0 {self.status} OK\r\nContent-Type: {content_type}\r\n{length}\r\n"
            drip(handler, head.encode(), body, self.drip, head_at_once=self.drip_body)
            return
        send(handler, self.status, body, content_type)


def drip(
    handler: BaseHTTPRequestHandler, head: bytes, body: bytes, every: float, *, head_at_once: bool
) -> None:
    """Send `head` then `body` a byte every `every` seconds (the head at once if told); a client
    that hangs up ends it."""
    if head_at_once:
        handler.wfile.write(head)
        head = b""
    try:
        for byte in head + body:
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()
            time.sleep(every)
    except OSError:
        return


class FaultyProxy(_Server):
    """An HTTP proxy in front of `upstream` (a Prometheus) that can go down, slow, or erroring.

    mode "up" forwards, "slow" waits `delay` seconds first, "error" answers 503 like an
    overloaded Prometheus, "drip" answers at once but sends the upstream's body a byte every
    `drip` seconds without Content-Length, "drip-head" drips from the status line on,
    "drip-length" drips a body whose Content-Length it gave; stop() closes the port (connections
    refused) and start() reopens it.
    """

    def __init__(self, upstream: str) -> None:
        super().__init__()
        self.upstream = upstream.rstrip("/")
        self.mode = "up"
        self.delay = 10.0
        self.drip = 0.05

    def respond(self, handler: BaseHTTPRequestHandler) -> None:
        if self.mode == "slow":
            time.sleep(self.delay)
        if self.mode == "error":
            body = b'{"status":"error","errorType":"unavailable","error":"overloaded"}'
            send(handler, 503, body, "application/json")
            return
        status, body = http_get(self.upstream + handler.path, timeout=10)
        if self.mode.startswith("drip"):
            length = f"Content-Length: {len(body)}\r\n" if self.mode == "drip-length" else ""
            head = f"HTTP/1.0 {status} OK\r\nContent-Type: application/json\r\n{length}\r\n"
            drip(handler, head.encode(), body, self.drip, head_at_once=self.mode != "drip-head")
            return
        send(handler, status, body, "application/json")


class PrometheusServer:
    """The Debian `prometheus` binary on a free loopback port, from a generated config."""

    def __init__(self, workdir: Path, scrape_configs: list[dict[str, Any]]) -> None:
        self.workdir = workdir
        self.scrape_configs = scrape_configs
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.started_in = 0.0
        self._launched_at = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @staticmethod
    def binary() -> str | None:
        return shutil.which("prometheus")

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        return self.launch().wait_ready(timeout)

    def launch(self) -> PrometheusServer:
        """Start the process; wait_ready() waits for it to answer."""
        binary = self.binary()
        assert binary, "prometheus is not installed"
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "evaluation_interval": "1s",
            },
            "scrape_configs": self.scrape_configs,
        }
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(config))
        self.port = free_port()
        self._launched_at = time.monotonic()
        with (self.workdir / "prometheus.log").open("wb") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config_file}",
                    f"--storage.tsdb.path={self.workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=1h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return self

    def wait_ready(self, timeout: float = 30.0) -> PrometheusServer:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            if self._ready():
                self.started_in = time.monotonic() - self._launched_at
                return self
            time.sleep(0.1)
        self.stop()
        log_text = (self.workdir / "prometheus.log").read_text()
        raise RuntimeError(f"prometheus did not start: {log_text}")

    def _ready(self) -> bool:
        try:
            return http_get(f"{self.url}/-/ready", timeout=1)[0] == 200
        except OSError:
            return False

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
