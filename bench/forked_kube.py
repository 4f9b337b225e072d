"""A simulated Kubernetes cluster served from a forked child process, as a real API server runs
beside its clients: a benchmark measuring a client through it (`bench_fakekube`, `bench_worker
--side kubernetes`) then shares no interpreter lock with the server, and the CPU time of its own
process is the client's alone (the child's is read from /proc)."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kubernetes import client

from bench.loopback import free_port, http_get
from sim.kubernetes.launch import SimulatedCluster


@dataclass(frozen=True)
class ForkedCluster:
    pid: int
    url: str

    def api_client(self, *, pool: int | None = None) -> client.ApiClient:
        """An official client of the server, keeping up to `pool` connections open (None: the
        client's default, as a kubeconfig gives it)."""
        configuration = client.Configuration()
        configuration.host = self.url
        if pool is not None:
            configuration.connection_pool_maxsize = pool
        return client.ApiClient(configuration)


@contextmanager
def forked_cluster(
    build: Callable[[int], SimulatedCluster], *, kubelets_every_s: float | None = None
) -> Iterator[ForkedCluster]:
    """Fork a child that builds the cluster on a free port (`build(port)`, in the child), serves
    it, with the kubelets stepping every `kubelets_every_s` (None: never), until SIGTERM."""
    port = free_port()
    pid = os.fork()
    if pid == 0:  # the child: serve, never return into the caller
        code = 0
        try:
            stop = threading.Event()
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            simulated = build(port).start()
            while not stop.wait(kubelets_every_s or 3600.0):
                if kubelets_every_s is not None:
                    simulated.run_once()
            simulated.close()
        except BaseException:
            code = 1
        os._exit(code)
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_ready(url, pid)
        yield ForkedCluster(pid, url)
    finally:
        os.kill(pid, signal.SIGTERM)
        os.waitpid(pid, 0)


def _wait_ready(url: str, pid: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            raise RuntimeError("the simulated API server exited before serving")
        try:
            if http_get(f"{url}/readyz", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the simulated API server did not come up")
