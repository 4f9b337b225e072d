"""BoundedSession against a loopback HTTP/1.1 server that keeps its connections alive (as a real
Prometheus does): a request sent on a connection kept from an earlier one is bounded as well."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
import requests

from telemetry.bounded_http import BoundedSession

BODY = b'{"status":"success","data":{"resultType":"vector","result":[]}}'


class KeepAliveServer:
    """Answers each request of a connection in turn: at once while `drip` is 0, else a byte
    every `drip` seconds; counts the connections it accepted."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.drip = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:  # closed
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as requests_in:
            try:
                while requests_in.readline():  # a request line
                    while requests_in.readline() not in (b"\r\n", b"\n", b""):
                        pass  # the request's headers
                    answer = (
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
                        + BODY
                    )
                    if not self.drip:
                        conn.sendall(answer)
                        continue
                    for byte in answer:
                        conn.sendall(bytes([byte]))
                        time.sleep(self.drip)
            except OSError:  # the client hung up
                return


@pytest.fixture
def server() -> Iterator[KeepAliveServer]:
    server = KeepAliveServer()
    yield server
    server.listener.close()


def test_a_kept_alive_connection_is_bounded_too(server: KeepAliveServer) -> None:
    session = BoundedSession(timeout=0.5, max_bytes=1 << 20)
    url = f"http://127.0.0.1:{server.port}/api/v1/query"
    assert session.get(url).content == BODY
    server.drip = 0.05
    started = time.monotonic()
    with pytest.raises(requests.Timeout, match="timed out after 0.5 s"):
        session.get(url)
    assert time.monotonic() - started < 1.5
    assert server.connections == 1  # the second request went on the first one's connection
