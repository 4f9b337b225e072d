"""HTTP requests that end by a deadline however the server frames or paces its answer (issue 33).

A socket timeout bounds each wait on a socket, not a request: a server dripping its headers or
body a byte at a time, or sending a body without Content-Length that ends only when it closes,
holds the caller for as long as it likes. Here a watchdog (`Watchdog`) shuts down, at the
deadline, every socket the request opened, which unblocks whatever its thread waits for; what was
read by then is only part of the answer and is thrown away. Bodies are also capped in size.

    http_get        one GET through http.client (ScrapeSource: dcgm-exporter `/metrics`).
    BoundedSession  a requests.Session for clients built on requests (PrometheusSource hands one
                    to prometheus-api-client's PrometheusConnect): the `timeout` a client passes
                    is one deadline over the whole request, nothing is retried, no proxy is
                    taken from the environment.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

import requests
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

TIMED_OUT = "timed out"


class Watchdog:
    """Shuts down the sockets handed to watch() at `deadline` (time.monotonic()), and says
    whether it did (`expired`): one deadline over every socket of a request or of a fetch."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.expired = threading.Event()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(self.remaining(), 0.0), self._expire)
        self._timer.daemon = True
        self._timer.start()

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def watch(self, sock: socket.socket | None) -> None:
        if sock is None:
            return
        with self._lock:
            self._sockets.append(sock)
            if self.expired.is_set():  # opened after the deadline (a race with _expire)
                _shut_down(sock)

    def cancel(self) -> None:
        self._timer.cancel()

    def _expire(self) -> None:
        with self._lock:
            self.expired.set()
            for sock in self._sockets:
                _shut_down(sock)


def _shut_down(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):  # already closed
        sock.shutdown(socket.SHUT_RDWR)


# --- one GET through http.client ----------------------------------------------------------------


def http_get(url: str, *, deadline: float, max_bytes: int, accept: str) -> tuple[bytes, str | None]:
    """The body of `url`, or the error (TIMED_OUT at the deadline), by `deadline` in all: neither
    a stalled connect, nor headers or a body dripped a byte at a time (each read well within any
    socket timeout), nor a body without Content-Length read to the close, holds the caller
    longer."""
    if deadline - time.monotonic() <= 0:
        return b"", f"{TIMED_OUT} before it could start"
    parts = urlsplit(url)
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    watchdog = Watchdog(deadline)
    connection = kind(parts.hostname or "", parts.port, timeout=max(watchdog.remaining(), 0.001))
    chunks: list[bytes] = []
    try:
        connection.connect()  # bounded by the socket timeout: no socket to shut down before
        watchdog.watch(connection.sock)  # held here: the connection drops it on a read-to-close
        connection.request("GET", target, headers={"Accept": accept})
        response = connection.getresponse()
        size = 0
        while chunk := response.read1(1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                return b"", f"response larger than {max_bytes} bytes"
        if response.status != 200:
            said = b"".join(chunks)[:300].decode("utf-8", errors="replace").strip()
            return b"", f"HTTP {response.status} {response.reason}" + (f": {said}" if said else "")
    except Exception as exc:  # every failure of one request is that request's error
        if watchdog.expired.is_set() or isinstance(exc, TimeoutError):
            return b"", TIMED_OUT
        return b"", f"{type(exc).__name__}: {exc}"
    finally:
        watchdog.cancel()
        connection.close()
    if watchdog.expired.is_set():  # cut off while reading: what came is only part of the body
        return b"", TIMED_OUT
    return b"".join(chunks), None


# --- requests ------------------------------------------------------------------------------------

# The watchdog of the request the current thread is sending: urllib3 opens (or reuses) the
# connection on the thread that calls send(), and the connection hands its socket to it.
_sending = threading.local()


class _WatchedConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()  # the TCP socket, before any TLS handshake on it
        _watch(sock)
        return sock

    def request(self, *args: Any, **kwargs: Any) -> None:
        _watch(self.sock)  # a connection kept alive from an earlier request
        super().request(*args, **kwargs)


class _WatchedHTTPSConnection(_WatchedConnection, HTTPSConnection):
    """HTTPS: the TCP socket is watched, the TLS handshake on it is within the deadline too."""


def _watch(sock: socket.socket | None) -> None:
    watchdog: Watchdog | None = getattr(_sending, "watchdog", None)
    if watchdog is not None:
        watchdog.watch(sock)


class _WatchedPool(HTTPConnectionPool):
    ConnectionCls = _WatchedConnection


class _WatchedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


class ResponseTooLarge(requests.RequestException):
    """The body passed BoundedSession's `max_bytes`."""


class _BoundedAdapter(HTTPAdapter):
    def __init__(self, *, timeout: float, max_bytes: int) -> None:
        self.timeout = timeout
        self.max_bytes = max_bytes
        super().__init__(max_retries=0)  # the next cycle is the retry

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _WatchedPool, "https": _WatchedHTTPSPool}

    def send(  # type: ignore[override]
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        **kwargs: Any,
    ) -> requests.Response:
        """Headers and the whole body by one deadline: `timeout` (a number) from now, else the
        session's. The body is read here, whether or not the caller asked to stream it."""
        seconds = timeout if isinstance(timeout, int | float) else self.timeout
        watchdog = Watchdog(time.monotonic() + seconds)
        _sending.watchdog = watchdog
        try:
            response = super().send(request, stream=True, timeout=seconds, **kwargs)
            body = self._body(response)
        except Exception as exc:  # cut off at the deadline, whatever broke first
            if watchdog.expired.is_set():
                raise requests.Timeout(f"{TIMED_OUT} after {seconds:g} s") from exc
            raise
        finally:
            _sending.watchdog = None
            watchdog.cancel()
        if watchdog.expired.is_set():  # a body read to the close ends when it is cut off
            raise requests.Timeout(f"{TIMED_OUT} after {seconds:g} s")
        response._content = body
        return response

    def _body(self, response: requests.Response) -> bytes:
        chunks: list[bytes] = []
        size = 0
        with contextlib.closing(response):
            for chunk in response.iter_content(1 << 16):  # decoded: the cap is on what we hold
                chunks.append(chunk)
                size += len(chunk)
                if size > self.max_bytes:
                    raise ResponseTooLarge(f"response larger than {self.max_bytes} bytes")
        return b"".join(chunks)


class BoundedSession(requests.Session):
    """Every request through one adapter (whatever a client mounts: PrometheusConnect mounts one
    that retries with back-off) that ends by `timeout` in all and holds at most `max_bytes` of
    body. Servers are reached directly, never through a proxy from the environment."""

    def __init__(self, *, timeout: float, max_bytes: int) -> None:
        super().__init__()
        self.trust_env = False
        self._bounded = _BoundedAdapter(timeout=timeout, max_bytes=max_bytes)

    def get_adapter(self, url: str) -> HTTPAdapter:
        return self._bounded

    def close(self) -> None:
        self._bounded.close()
        super().close()
