"""Real servers and processes for the fault tests: a private PostgreSQL cluster and a private Redis
that a test may stop, kill and start again (the machine's shared servers are never touched), and
gpusched's worker processes (`manage.py` commands) on a database chosen by URL. Web processes are
the dashboard tests' `web_server` (tests/dashboard/servers.py; its `environment` points it at
another database or settings module)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Self

import pytest
from django.conf import settings

from tests.dashboard.servers import ROOT, free_port
from tests.telemetry.servers import wait_for

__all__ = ["ROOT", "free_port", "wait_for"]

PG_BIN_GLOB = "/usr/lib/postgresql/*/bin"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(
    method: str,
    url: str,
    *,
    body: bytes | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    """One HTTP request (no proxy); (status, body) also for error statuses."""
    request = urllib.request.Request(url, data=body, method=method, headers=dict(headers or {}))
    try:
        with _NO_PROXY.open(request, timeout=timeout) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()


# --- PostgreSQL -----------------------------------------------------------------------------------


def _pg_bin() -> Path | None:
    found = sorted(Path("/").glob(PG_BIN_GLOB.lstrip("/")), key=lambda p: p.parent.name)
    for directory in reversed(found):
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


class PrivatePostgres:
    """A PostgreSQL cluster of this test's own: initdb into a temporary directory, pg_ctl on a free
    loopback port. As root the server runs as the `postgres` user (PostgreSQL refuses root), as
    scripts/test.sh does it. `stop()`/`start()` keep the data and the port."""

    def __init__(self) -> None:
        pg_bin = _pg_bin()
        if pg_bin is None:
            pytest.skip(f"no PostgreSQL server binaries ({PG_BIN_GLOB}/initdb)")
        self.bin = pg_bin
        self.as_root = os.geteuid() == 0
        if self.as_root and shutil.which("runuser") is None:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as postgres")
        # Not under pytest's tmp_path: its parents are private to root, postgres must enter it.
        self.root = Path(tempfile.mkdtemp(prefix="gpusched-faults-pg."))
        self.root.chmod(0o755)
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()

    def url(self, database: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        command = [*(["runuser", "-u", "postgres", "--"] if self.as_root else []), *args]
        result = subprocess.run(command, capture_output=True, timeout=timeout, check=False)
        if result.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise RuntimeError(
                f"{' '.join(args)} failed: {result.stderr.decode()}{result.stdout.decode()}{log}"
            )

    def init(self) -> Self:
        self.data.mkdir()
        self.log.touch()
        if self.as_root:
            shutil.chown(self.data, "postgres")
            shutil.chown(self.log, "postgres")
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
        )
        return self

    def start(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.data} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.log), "-w",
            "-o", options, "start",
        )  # fmt: skip

    def stop(self, mode: str = "fast") -> None:
        """`fast`: sessions are terminated (their clients get an error), like a restart does."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-m", mode, "stop")

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def close(self) -> None:
        if self.running():
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    server = PrivatePostgres()
    try:
        server.init().start()
        yield server
    finally:
        server.close()


# --- Redis ----------------------------------------------------------------------------------------


class PrivateRedis:
    """A redis-server of this test's own on a free loopback port, without persistence. `kill()`
    is a crash (SIGKILL); `start()` comes back on the same port, empty."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("no redis-server binary (scripts/test.sh installs redis-server)")
        self.binary = binary
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.dir = Path(tempfile.mkdtemp(prefix="gpusched-faults-redis."))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> Self:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--bind", "127.0.0.1",
                "--port", str(self.port),
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.dir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        wait_for(self.ping, timeout=15, interval=0.05)
        return self

    def ping(self) -> bool:
        import redis

        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            return bool(client.ping())
        finally:
            client.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
            self.process = None

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def private_redis() -> Iterator[PrivateRedis]:
    server = PrivateRedis()
    try:
        yield server.start()
    finally:
        server.close()


# --- gpusched processes ---------------------------------------------------------------------------


def process_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "GPUSCHED_SECRET_KEY": str(settings.SECRET_KEY),  # sessions made by the tests are valid
        "GPUSCHED_LOG_LEVEL": "WARNING",
    }
    env.pop("REDIS_URL", None)
    env.update(extra)
    return env


def manage(
    *args: str, database_url: str, log: Path | None = None, **env: str
) -> subprocess.Popen[bytes]:
    """`manage.py ARGS` in the background; its output goes to `log` (else nowhere)."""
    out: IO[bytes] | int = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115
    try:
        return subprocess.Popen(
            [sys.executable, "manage.py", *args],
            cwd=ROOT,
            env=process_env(database_url, **env),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    finally:
        if not isinstance(out, int):
            out.close()  # the child has its own descriptor


def stop(*processes: subprocess.Popen[bytes], timeout: float = 20) -> None:
    """SIGTERM (each finishes its step), then wait; SIGKILL what does not stop in time."""
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def tail(path: Path, lines: int = 40) -> str:
    """The end of a process log, for assertion messages."""
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# --- the REST API as a tenant uses it -------------------------------------------------------------


def workload_body(name: str, *, pods: int, gpus: int = 0, gpu_milli: int = 0) -> dict[str, object]:
    requests = {"cpu": "500m", "memory": "1Gi"}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    if gpu_milli:
        requests["gpusched.io/gpu-milli"] = str(gpu_milli)
    return {
        "name": name,
        "serviceClass": "batch",
        "podSets": [
            {"name": "main", "count": pods, "template": {"resources": {"requests": requests}}}
        ],
    }


class Api:
    """A tenant's REST client on one web process (Bearer token)."""

    def __init__(self, base: str, token: str) -> None:
        self.base = base
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, Any]:
        status, body = http("GET", self.base + path, headers=self.headers, timeout=timeout)
        try:
            return status, json.loads(body)
        except ValueError:  # an error page
            return status, body.decode(errors="replace")

    def submit(self, body: Mapping[str, object], timeout: float = 5.0) -> int:
        """POST /api/v1/workloads once, idempotent by the workload's name: the status."""
        headers = {**self.headers, "Idempotency-Key": str(body["name"])}
        data = json.dumps(body).encode()
        url = f"{self.base}/api/v1/workloads"
        return http("POST", url, body=data, headers=headers, timeout=timeout)[0]

    def submit_until_accepted(self, body: Mapping[str, object], *, deadline_s: float = 60.0) -> int:
        """Submit, retrying through connection errors and 5xx answers (an outage) with the same
        Idempotency-Key, as a careful client does; the number of failed tries."""
        failures = 0
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                status = self.submit(body)
            except OSError:
                status = 0
            if status in (200, 201):
                return failures
            assert status == 0 or status >= 500, f"{body['name']}: answered {status}"
            failures += 1
            assert time.monotonic() < deadline, f"{body['name']}: not accepted in {deadline_s} s"
            time.sleep(0.2)
