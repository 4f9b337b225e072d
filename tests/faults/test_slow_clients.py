"""Slow and stuck API clients against a real web process while a real scheduler process places
what a well-behaved client submits."""

from __future__ import annotations

import select
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import F, Max

from api import services as api_services
from scheduling.models import Pod
from tests.dashboard.servers import database_url, web_server
from tests.faults.dbtool import placement_problems
from tests.faults.servers import Api, manage, stop, tail, wait_for, workload_body
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db(transaction=True)]

SLOW_WRITERS = 20  # requests whose body trickles in, a byte at a time
SLOW_READERS = 10  # large responses nobody reads
WORKLOADS = 10  # per phase, from the fast client


class SlowClients:
    """Connections to the web process that hold a request open: writers send a POST's headers
    and then its body one byte every 0.1 s; readers ask for a large list with a 4 KiB receive
    buffer and never read it."""

    def __init__(self, base: str, tenant_token: str, admin_token: str) -> None:
        self.port = int(base.rsplit(":", 1)[1])
        self.tenant_token = tenant_token
        self.admin_token = admin_token
        self.writers: list[socket.socket] = []
        self.readers: list[socket.socket] = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._trickle, daemon=True)

    def _connect(self, receive_buffer: int | None = None) -> socket.socket:
        sock = socket.socket()
        if receive_buffer:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.connect(("127.0.0.1", self.port))
        return sock

    def start(self) -> None:
        for _ in range(SLOW_WRITERS):
            sock = self._connect()
            sock.sendall(
                (
                    "POST /api/v1/workloads HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Authorization: Bearer {self.tenant_token}\r\n"
                    "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
                ).encode()
            )
            self.writers.append(sock)
        for _ in range(SLOW_READERS):
            sock = self._connect(receive_buffer=4096)
            sock.sendall(
                (
                    "GET /api/v1/admin/nodes?limit=500 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    f"Authorization: Bearer {self.admin_token}\r\n\r\n"
                ).encode()
            )
            self.readers.append(sock)
        self.thread.start()

    def _trickle(self) -> None:
        while not self.stopped.wait(0.1):
            for sock in self.writers:
                sock.send(b" ")

    def readers_answered(self) -> bool:
        """Every reader's answer has started to arrive: the web process is stuck writing them."""
        readable, _, _ = select.select(self.readers, [], [], 0)
        return len(readable) == len(self.readers)

    def still_hanging(self) -> bool:
        """No writer got an answer (its request is not complete), every socket is still open,
        and the readers' answers wait unread."""
        for sock in self.writers:
            try:
                sock.recv(1, socket.MSG_DONTWAIT)
                return False  # closed, or answered before its request was complete
            except BlockingIOError:
                pass
        return all(sock.recv(16, socket.MSG_PEEK) for sock in self.readers)

    def close(self) -> None:
        self.stopped.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)
        for sock in [*self.writers, *self.readers]:
            sock.close()


@contextmanager
def slow_clients(base: str, tenant_token: str, admin_token: str) -> Iterator[SlowClients]:
    clients = SlowClients(base, tenant_token, admin_token)
    try:
        clients.start()
        yield clients
    finally:
        clients.close()


def list_latencies(api: Api, count: int) -> list[float]:
    latencies = []
    for _ in range(count):
        started = time.monotonic()
        status, body = api.get("/api/v1/workloads?limit=50")
        latencies.append(time.monotonic() - started)
        assert status == 200, body
    return latencies


def submit_phase(api: Api, prefix: str) -> list[str]:
    names = [f"{prefix}-{k}" for k in range(WORKLOADS)]
    for name in names:
        status = api.submit(workload_body(name, pods=2, gpus=1))
        assert status == 201, status
        time.sleep(0.05)
    return names


def time_to_bound(names: list[str]) -> float:
    """The longest wait, submit to bound, of the pods of these workloads."""
    try:
        waits = Pod.objects.filter(workload__name__in=names).aggregate(
            longest=Max(F("bound_at") - F("workload__created_at"))
        )["longest"]
    finally:
        connection.close()
    assert isinstance(waits, timedelta)
    return waits.total_seconds()


def all_bound(names: list[str]) -> bool:
    try:
        pods = Pod.objects.filter(workload__name__in=names)
        return pods.count() == 2 * len(names) and not pods.exclude(phase="Bound").exists()
    finally:
        connection.close()


def test_slow_api_clients_stall_neither_the_loop_nor_other_clients(tmp_path: Path) -> None:
    """Fault: 20 clients send a POST body a byte every 0.1 s and 10 clients ask for the 100-node
    admin list and never read the answer, all held open on the web process for the whole phase.

    Expected: the scheduler process places what a well-behaved client submits as fast as
    without them (every pod bound within 5 s of its submit, in both phases); that client's list
    requests are answered within normal latency (median under 0.5 s or 3x the baseline, none over
    3 s); and the slow clients are still hanging at the end (nobody closed them or answered half a
    request)."""
    factories.nodes(100)
    tenant = factories.tenant()
    _, tenant_token = api_services.token_create(tenant=tenant, name="fast")
    admin = User.objects.create_user("admin", password="pw-not-used", is_staff=True)
    _, admin_token = api_services.token_create(user=admin, name="admin")
    connection.close()

    log = tmp_path / "runscheduler.log"
    scheduler = manage(
        "runscheduler", "--loop", "--profile", "topology", "--interval", "0.05",
        database_url=database_url(), log=log,
    )  # fmt: skip
    environment = {"GPUSCHED_API_RATE": "100000/min", "GPUSCHED_API_SUBMIT_RATE": "100000/min"}
    try:
        with web_server(environment=environment) as base:
            api = Api(base, tenant_token)
            # Without slow clients: the normal rate.
            baseline = list_latencies(api, 10)
            before = submit_phase(api, "before")
            wait_for(lambda: all_bound(before), timeout=20)

            with slow_clients(base, tenant_token, admin_token) as slow:
                wait_for(slow.readers_answered, timeout=20)  # all of them connected and stuck
                during = submit_phase(api, "during")
                latencies = list_latencies(api, 20)
                wait_for(lambda: all_bound(during), timeout=20)
                assert slow.still_hanging()

        assert scheduler.poll() is None, tail(log)
    finally:
        stop(scheduler)

    assert time_to_bound(before) < 5.0
    assert time_to_bound(during) < 5.0
    assert statistics.median(latencies) < max(0.5, 3 * statistics.median(baseline)), latencies
    assert max(latencies) < 3.0, latencies
    assert placement_problems() == []
