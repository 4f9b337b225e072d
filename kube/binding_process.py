"""Bindings sent from a process of their own (`runkube`, `bench_worker --side kubernetes`).

kube-scheduler binds each pod on a goroutine of its own, beside its scheduling cycle. Threads here
share the interpreter lock with the cycle: every time the cycle lets go of it (a numpy loop, a
database round trip) a binder thread answering the API server takes it, and the cycle waits. At
5,000 nodes x 20,000 pods that wait cost more than the Bindings themselves (docs/benchmarks.md,
issue 35). A child process sends them instead, several at a time on its own threads and its own
connections to the API server, and answers each chunk as one message.

The child connects as the parent did (`Connection`: the same kubeconfig, context or service
account, or a plain address), so the credentials it uses are read where they live, never copied
through the pipe. The child runs `kube.bind_request.send_binding`, as the binder's threads do
after a pod's claims are written: the Binding, then the `Scheduled` event the parent's budget
allowed.
"""

from __future__ import annotations

import atexit
import multiprocessing
import signal
import time
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial

from kubernetes import client

from kube.api import CONNECTIONS, BindOutcome, KubeApi, connect
from kube.bind_request import BIND_CONCURRENCY, BindRequest, send_binding


@dataclass(frozen=True)
class Connection:
    """How the binding process reaches the API server: `host` alone (a simulated cluster, no
    credentials), else `kube.api.connect`'s arguments."""

    host: str = ""
    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool | None = None

    def api_client(self) -> client.ApiClient:
        if not self.host:
            return connect(
                kubeconfig=self.kubeconfig, context=self.context, in_cluster=self.in_cluster
            )
        configuration = client.Configuration()
        configuration.host = self.host
        configuration.connection_pool_maxsize = CONNECTIONS
        return client.ApiClient(configuration)


@dataclass(frozen=True)
class Reporter:
    """Who the child's events say reported them (the parent's KubeApi's names)."""

    instance: str
    controller: str
    timeout_s: float


# The child's API and threads, made once by its initializer.
_child: tuple[KubeApi, ThreadPoolExecutor] | None = None


def _start_child(connection: Connection, reporter: Reporter) -> None:
    global _child
    # A Ctrl-C reaches the whole process group: the parent decides when its Bindings stop
    # (`close()`, which lets the chunk being sent finish).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    api = KubeApi(
        connection.api_client(),
        reporting_instance=reporter.instance,
        reporting_controller=reporter.controller,
        timeout_s=reporter.timeout_s,
    )
    _child = (api, ThreadPoolExecutor(BIND_CONCURRENCY, thread_name_prefix="binder"))


def _cpu_s() -> float:
    return time.process_time()


def _send_all(requests: list[BindRequest]) -> list[BindOutcome]:
    assert _child is not None, "the binding process was not started"
    api, pool = _child
    return list(pool.map(partial(send_binding, api), requests))


class BindingProcess:
    """The child, started at the first chunk; `close()` (or the interpreter's exit) stops it."""

    def __init__(self, connection: Connection, reporter: Reporter) -> None:
        self.connection = connection
        self.reporter = reporter
        self._executor: ProcessPoolExecutor | None = None
        self._broken = False  # the child died: the next chunk starts another
        self._exit_registered = False

    def submit(self, requests: list[BindRequest]) -> list[Future[BindOutcome | None]]:
        """One future per request, answered together once the child sent them all (each
        failed with the error if the child could not send them: it died meanwhile, say)."""
        try:
            chunk = self._started().submit(_send_all, requests)
        except BrokenProcessPool:  # the child died since the last chunk: another sends this one
            self._broken = True
            chunk = self._started().submit(_send_all, requests)
        answers: list[Future[BindOutcome | None]] = [Future() for _ in requests]

        def answer(done: Future[list[BindOutcome]]) -> None:
            error = done.exception()
            if isinstance(error, BrokenProcessPool):
                self._broken = True
            for k, future in enumerate(answers):
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(done.result()[k])

        chunk.add_done_callback(answer)
        return answers

    def _started(self) -> ProcessPoolExecutor:
        if self._executor is not None and self._broken:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        self._broken = False
        if self._executor is None:
            # spawn, not fork: the parent runs informer threads and holds database connections,
            # none of which a forked child could use safely.
            self._executor = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_child,
                initargs=(self.connection, self.reporter),
            )
            if not self._exit_registered:
                atexit.register(self.close)
                self._exit_registered = True
        return self._executor

    def cpu_s(self) -> float:
        """The child's CPU seconds so far (every thread of it); 0 before it started."""
        return self._executor.submit(_cpu_s).result() if self._executor is not None else 0.0

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=False)
            self._executor = None
