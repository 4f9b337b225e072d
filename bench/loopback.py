"""Loopback plumbing for the native stack and its benchmark: free ports, HTTP without proxies, TCP
probes, a scratch PostgreSQL database, Redis database numbers, and a process's CPU and memory from
/proc. No Django here."""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """GET without any proxy from the environment; (status, body)."""
    try:
        with _NO_PROXY.open(url, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def tcp_open(url: str, default_port: int) -> bool:
    """Something accepts TCP connections at the URL's host and port."""
    parts = urllib.parse.urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 1
        ):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def scratch_postgres_database(server_url: str, prefix: str = "gpusched_stack") -> Iterator[str]:
    """A new, empty database on the PostgreSQL server of `server_url`; its URL. Dropped after
    (its connections closed first)."""
    import psycopg

    parts = urllib.parse.urlsplit(server_url)
    name = f"{prefix}_{secrets.token_hex(4)}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urllib.parse.urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def with_redis_db(url: str, db: int) -> str:
    """The same Redis server, another logical database."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(parts._replace(path=f"/{db}"))


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process (Linux /proc), None when unknown."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None
