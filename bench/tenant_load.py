"""The tenants of `manage.py bench_stack`: each drives the REST API with two keep-alive HTTP
clients (one thread each), a submitter that posts workloads back to back within its quota and a
reaper that lists what was placed, records submit -> Bound per pod and cancels each workload
`hold` seconds later; a Recorder tallies every request. No Django here: plain HTTP."""

from __future__ import annotations

import collections
import http.client
import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

# (pods, GPUs per pod): what the tenants submit, in turn.
SHAPES = ((1, 1), (2, 1), (1, 2), (1, 4))
POLL_S = 0.25
DRAIN_S = 10.0  # after the run, how long the reapers wait for the last pods to be bound
ENDPOINTS = (
    "POST /api/v1/workloads",
    "GET /api/v1/workloads",
    "GET /api/v1/workloads/{name}/pods",
    "POST /api/v1/workloads/{name}/cancel",
)


class Recorder:
    """Thread-safe tallies of every request: latency per endpoint, statuses, failures."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.latency_ms: dict[str, list[float]] = {e: [] for e in ENDPOINTS}
        self.statuses: collections.Counter[str] = collections.Counter()
        self.transport_errors = 0
        self.timeouts = 0
        self.bound_ms: list[float] = []
        self.submitted_workloads = 0
        self.submitted_pods = 0
        self.submitted_gpus = 0
        self.cancelled = 0


class Client:
    """One keep-alive HTTP/1.1 connection to the web role, with the tenant's token."""

    def __init__(self, port: int, token: str, recorder: Recorder) -> None:
        self.port = port
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.recorder = recorder
        self.conn = self._connect()

    def _connect(self) -> http.client.HTTPConnection:
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)

    def call(
        self, method: str, path: str, endpoint: str, body: dict[str, Any] | None = None
    ) -> tuple[int, Any]:
        data = json.dumps(body) if body is not None else None
        started = time.perf_counter()
        try:
            self.conn.request(method, path, body=data, headers=self.headers)
            response = self.conn.getresponse()
            raw = response.read()
            status = response.status
        except TimeoutError:
            self._reset()
            with self.recorder.lock:
                self.recorder.timeouts += 1
            return 0, None
        except (OSError, http.client.HTTPException):
            self._reset()
            with self.recorder.lock:
                self.recorder.transport_errors += 1
            return 0, None
        elapsed = (time.perf_counter() - started) * 1000
        with self.recorder.lock:
            self.recorder.latency_ms[endpoint].append(elapsed)
            self.recorder.statuses[str(status)] += 1
        try:
            return status, json.loads(raw) if raw else None
        except ValueError:
            return status, None

    def _reset(self) -> None:
        self.conn.close()
        self.conn = self._connect()

    def close(self) -> None:
        self.conn.close()


@dataclass
class Outstanding:
    gpus: int
    bound_seen: float | None = None


@dataclass
class TenantLoad:
    name: str
    token: str
    queue: str
    quota_gpus: int
    outstanding: dict[str, Outstanding] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def held_gpus(self) -> int:
        with self.lock:
            return sum(o.gpus for o in self.outstanding.values())


def _workload(name: str, queue: str, pods: int, gpus: int) -> dict[str, Any]:
    requests = {"cpu": str(4 * gpus), "memory": f"{16 * gpus}Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "name": name,
        "queueName": queue,
        "serviceClass": "batch",
        "podSets": [
            {"name": "main", "count": pods, "template": {"resources": {"requests": requests}}}
        ],
    }


def submitter(
    tenant: TenantLoad, port: int, recorder: Recorder, start: threading.Event, deadline: list[float]
) -> None:
    start.wait()
    client = Client(port, tenant.token, recorder)
    k = 0
    try:
        while time.monotonic() < deadline[0]:
            pods, gpus = SHAPES[k % len(SHAPES)]
            if tenant.held_gpus() + pods * gpus > tenant.quota_gpus:
                time.sleep(0.01)  # at quota: wait for the reaper to cancel something
                continue
            name = f"w-{k:06d}"
            k += 1
            status, _ = client.call(
                "POST",
                "/api/v1/workloads",
                ENDPOINTS[0],
                _workload(name, tenant.queue, pods, gpus),
            )
            if status == 201:
                with tenant.lock:
                    tenant.outstanding[name] = Outstanding(gpus=pods * gpus)
                with recorder.lock:
                    recorder.submitted_workloads += 1
                    recorder.submitted_pods += pods
                    recorder.submitted_gpus += pods * gpus
    finally:
        client.close()


def reaper(
    tenant: TenantLoad,
    port: int,
    recorder: Recorder,
    start: threading.Event,
    deadline: list[float],
    hold: float,
) -> None:
    start.wait()
    client = Client(port, tenant.token, recorder)
    list_path = "/api/v1/workloads?" + urllib.parse.urlencode(
        {"state": "Admitted,Running", "limit": 500}
    )
    try:
        while True:
            now = time.monotonic()
            with tenant.lock:
                unbound = [n for n, o in tenant.outstanding.items() if o.bound_seen is None]
            if now >= deadline[0] + DRAIN_S or (now >= deadline[0] and not unbound):
                return
            began = now
            status, doc = client.call("GET", list_path, ENDPOINTS[1])
            for item in (doc or {}).get("items", []) if status == 200 else []:
                pods = item["status"]["pods"]
                placed = pods["total"] and pods["bound"] + pods["running"] == pods["total"]
                with tenant.lock:
                    entry = tenant.outstanding.get(item["name"])
                if not placed or entry is None or entry.bound_seen is not None:
                    continue
                entry.bound_seen = time.monotonic()
                status, pod_doc = client.call(
                    "GET", f"/api/v1/workloads/{item['name']}/pods", ENDPOINTS[2]
                )
                if status == 200 and pod_doc:
                    waits = [
                        (
                            datetime.fromisoformat(p["boundAt"])
                            - datetime.fromisoformat(p["createdAt"])
                        ).total_seconds()
                        * 1000
                        for p in pod_doc["items"]
                        if p["boundAt"]
                    ]
                    with recorder.lock:
                        recorder.bound_ms.extend(waits)
            # The jobs that are done free their GPUs, in the drain too: a workload still waiting
            # there may need them (the tenant is at its quota).
            with tenant.lock:
                done = [
                    n
                    for n, o in tenant.outstanding.items()
                    if o.bound_seen is not None and time.monotonic() - o.bound_seen >= hold
                ]
            for name in done:
                status, _ = client.call("POST", f"/api/v1/workloads/{name}/cancel", ENDPOINTS[3])
                if status == 200:
                    with tenant.lock:
                        tenant.outstanding.pop(name, None)
                    with recorder.lock:
                        recorder.cancelled += 1
            time.sleep(max(0.0, POLL_S - (time.monotonic() - began)))
    finally:
        client.close()
