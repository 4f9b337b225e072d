"""What `manage.py demo` needs to run its roles as child processes on a shared machine: ports that
are settable by variable and checked before anything starts, children that die with the demo (even
under `kill -9`), start-up that waits for what a role depends on, and a claim on the demo's
database so that two demos from one checkout cannot share it."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from django.core.management.base import CommandError

# The variables that move each port of the demo (and of `simulate`/`fakekube` run alone).
WEB_PORT_VARIABLE = "GPUSCHED_PORT"
METRICS_PORT_VARIABLE = "GPUSCHED_DCGM_PORT"
KUBE_PORT_VARIABLE = "GPUSCHED_KUBE_PORT"
DEFAULT_PORTS = {WEB_PORT_VARIABLE: 8000, METRICS_PORT_VARIABLE: 9400, KUBE_PORT_VARIABLE: 6443}

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def port_default(variable: str) -> int:
    """The port a variable sets, else its documented default."""
    value = os.environ.get(variable, "")
    if not value:
        return DEFAULT_PORTS[variable]
    try:
        return int(value)
    except ValueError:
        raise CommandError(f"{variable}={value!r} is not a port number") from None


def port_in_use(host: str, port: int, variable: str) -> CommandError:
    """The one-line error for a port another process holds."""
    return CommandError(
        f"port {port} on {host} is already in use; set {variable} (or the command's option) "
        "to a free port"
    )


def bind_or_fail(host: str, port: int, variable: str, serve: Callable[[], Any]) -> Any:
    """`serve()` (which binds host:port), with an address in use as `port_in_use`."""
    try:
        return serve()
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise port_in_use(host, port, variable) from None
        raise


def require_free(host: str, port: int, variable: str) -> None:
    """Refuse before starting anything when host:port is taken (the servers set SO_REUSEADDR
    too, so a port only in TIME_WAIT is free)."""
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise port_in_use(host, port, variable) from None
            raise


def _die_with(parent: int) -> Callable[[], None]:
    """Run in the child before exec: SIGTERM when the parent dies, however it dies (Linux's
    parent-death signal); a parent already gone by then means exit at once."""

    def arm() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:
            os._exit(1)

    return arm


def spawn(argv: list[str], *, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A child in its own process group (Ctrl-C reaches only the demo, which stops the children
    in order) that receives SIGTERM if the demo dies."""
    return subprocess.Popen(
        argv, cwd=cwd, env=env, process_group=0, preexec_fn=_die_with(os.getpid())
    )


def wait_for_port(
    host: str, port: int, child: subprocess.Popen[bytes], name: str, timeout: float = 60
) -> None:
    """Until host:port accepts connections; the child that should listen there exiting (or the
    timeout) is an error naming it."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((host, port)) == 0:
                return
        if child.poll() is not None:
            raise CommandError(f"{name} exited with status {child.returncode} before listening")
        if time.monotonic() > deadline:
            raise CommandError(f"{name} did not listen on {host}:{port} within {timeout:g} s")
        time.sleep(0.1)


def database_identity(database: dict[str, Any]) -> str:
    """What tells two databases apart: a SQLite file's resolved path, else server and name."""
    if "sqlite" in database["ENGINE"]:
        return str(Path(database["NAME"]).resolve())
    return (
        f"{database['ENGINE']}://{database.get('HOST')}:{database.get('PORT')}/{database['NAME']}"
    )


def claim_database(var_dir: Path, database: dict[str, Any]) -> IO[str]:
    """An exclusive lock (held until the process exits, even by `kill -9`) on the demo's
    database; another demo already holding it is an error naming it and the variable to set."""
    identity = database_identity(database)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    var_dir.mkdir(parents=True, exist_ok=True)
    lock = (var_dir / f"demo-{digest}.lock").open("a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "?"
        lock.close()
        raise CommandError(
            f"another demo (pid {holder}) is using the database {identity}; set DATABASE_URL "
            "to another one (e.g. DATABASE_URL=sqlite:///var/demo2.sqlite3)"
        ) from None
    lock.truncate(0)
    lock.write(str(os.getpid()))
    lock.flush()
    return lock
