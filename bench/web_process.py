"""A real web process (`manage.py runweb`) on a free loopback port, on the database the caller is
connected to (a test's or a benchmark's throwaway one), with the in-memory channel layer or Redis.
Used by the dashboard tests and by `bench_live`."""

from __future__ import annotations

import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def database_url() -> str:
    """The URL of the database this process is connected to (a test's database, not the
    configured one)."""
    db: dict[str, Any] = connection.settings_dict
    if db["ENGINE"] == "django.db.backends.sqlite3":
        return f"sqlite:///{db['NAME']}"
    if db["ENGINE"] == "django.db.backends.postgresql":
        auth = db["USER"] + (f":{db['PASSWORD']}" if db.get("PASSWORD") else "")
        return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    raise RuntimeError(f"no URL for {db['ENGINE']}")


def signing_key() -> str:
    """This process's SECRET_KEY; with debug off and none configured, a throwaway one set first
    (a benchmark on a scratch database), so the web process and its caller sign alike."""
    try:
        return str(settings.SECRET_KEY)
    except ImproperlyConfigured:
        settings.SECRET_KEY = secrets.token_urlsafe(32)
        return str(settings.SECRET_KEY)


@contextmanager
def web_server(
    *,
    redis_url: str | None = None,
    log: Path | None = None,
    environment: Mapping[str, str] | None = None,
    tls: tuple[str, str] | None = None,
) -> Iterator[str]:
    """A web process; yields its base URL once /healthz answers. `environment` adds to or
    overrides its variables (e.g. GPUSCHED_DEBUG=0 for production mode); `tls` (certificate and
    key files) serves https."""
    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "GPUSCHED_DEBUG": "1",  # serves the static files
        "GPUSCHED_SECRET_KEY": signing_key(),  # sessions made by the caller are valid
        "GPUSCHED_LOG_LEVEL": "WARNING",
    }
    env.pop("REDIS_URL", None)
    if redis_url:
        env["REDIS_URL"] = redis_url
    env.update(environment or {})
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115
    arguments = ["--tls-cert", tls[0], "--tls-key", tls[1]] if tls else []
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "runweb", "--port", str(port), *arguments],
        cwd=ROOT,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    base = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    unverified = ssl._create_unverified_context() if tls else None  # only /healthz, here
    try:
        deadline = time.monotonic() + 30
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the web process exited with {process.returncode}")
            try:
                with urllib.request.urlopen(
                    f"{base}/healthz", timeout=1, context=unverified
                ) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the web process did not answer within 30 s")
            time.sleep(0.1)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if log:
            out.close()  # type: ignore[union-attr]
