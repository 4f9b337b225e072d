"""`manage.py bench_extender`: the extender on kube-scheduler's critical path, measured as it is
called: per pod, one HTTP POST /extender/filter and one /extender/prioritize carrying N NodeNames
(nodeCacheCapable), through the production web server (`runweb`: uvicorn and the ASGI app) on
loopback.

The cluster is the synthetic "mixed" fleet registered in the database (use a scratch database:
`DATABASE_URL=sqlite:///var/bench-extender.sqlite3`), filled to about half its GPUs by scheduling
a synthetic pod stream into the extender's snapshot; the timed pods are drawn from the same mix.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import signal
import socket
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections as db_connections

from kube import extender, services
from kube.extender_auth import ExtenderAuth
from kube.server import make_server
from scheduling.core.scheduler import Framework
from scheduling.core.types import PodRequest
from scheduling.models import Node
from scheduling.profile_files import command_profile
from sim.cluster import build_nodes, synthetic_pools
from sim.workload import synthetic_pods


@dataclass(frozen=True)
class _Child:
    pid: int
    number: int

    def cpu_s(self) -> float:
        """CPU time (user + system) the server has used so far, from /proc (Linux)."""
        with open(f"/proc/{self.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _serve_in_child(kind: str, token_file: str) -> _Child:
    """Fork a server: runextender's (`extender`) or the web process (`web`, runweb), both
    admitting the bearer token of `token_file` (plain HTTP on loopback: what is measured is the
    extender, not TLS)."""
    settings.WEB_EXTENDER = True
    settings.EXTENDER_TOKEN_FILE = token_file
    if kind == "extender":
        lean = make_server("127.0.0.1", 0, auth=ExtenderAuth.build(token_file=token_file))
        number = lean.server_address[1]
    else:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        number = probe.getsockname()[1]
        probe.close()
    db_connections.close_all()
    pid = os.fork()
    if pid == 0:  # the child serves until SIGTERM
        try:
            if kind == "extender":
                lean.serve_forever()
            else:
                call_command("runweb", port=number, no_access_log=True)
        finally:
            os._exit(0)
    if kind == "extender":
        lean.server_close()
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", number), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise CommandError(f"the {kind} server did not start") from None
            time.sleep(0.1)
    return _Child(pid, number)


def pod_json(pod: PodRequest) -> dict[str, Any]:
    """A v1.Pod asking what `pod` asks."""
    limits: dict[str, str] = {}
    if pod.gpus:
        limits["nvidia.com/gpu"] = str(pod.gpus)
    if pod.gpu_milli:
        limits["gpusched.io/gpu-milli"] = str(pod.gpu_milli)
    if pod.mig_count:
        limits[f"nvidia.com/mig-{pod.mig_profile}"] = str(pod.mig_count)
    annotations = {"gpusched.io/topology-policy": pod.topology_policy or "none"}
    if pod.topology_scope is not None:
        annotations["gpusched.io/topology-scope"] = pod.topology_scope.value
    resources: dict[str, Any] = {
        "requests": {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi"}
    }
    if limits:
        resources["limits"] = limits
    return {
        "metadata": {
            "name": pod.uid,
            "namespace": pod.namespace or "default",
            "uid": pod.uid,
            "annotations": annotations,
        },
        "spec": {"containers": [{"name": "main", "resources": resources}]},
    }


class Command(BaseCommand):
    help = "Time extender filter + prioritize round trips with N NodeNames."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=5000)
        parser.add_argument("--requests", type=int, default=300, help="timed pods")
        parser.add_argument("--fill", type=float, default=0.5, help="share of GPUs in use")
        parser.add_argument(
            "--warmup", type=int, default=100, help="untimed pods first (GPU-set tables)"
        )
        parser.add_argument("--profile", default="topology", help="profile name or YAML path")
        parser.add_argument(
            "--server",
            choices=["extender", "web"],
            default="extender",
            help="runextender's server, or the web process (runweb)",
        )
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        existing = Node.objects.count()
        started = time.perf_counter()
        if existing == 0:
            services.nodes_apply(specs=build_nodes(synthetic_pools(options["nodes"], "mixed")))
        elif existing != options["nodes"]:  # a previous run's cluster of the same size is reused
            raise CommandError(f"the database has {existing} nodes: use a scratch database")
        register_s = time.perf_counter() - started

        framework = Framework(command_profile(options["profile"]))
        ext = extender.Extender(framework)
        extender.install(ext)
        t0 = time.perf_counter()
        snapshot = ext.cluster().snapshot
        snapshot_s = time.perf_counter() - t0
        capacity = int(snapshot.gpu_count.sum())
        filled = 0
        stream = synthetic_pods(options["nodes"] * 16, seed=1)
        for pod in stream:
            if filled >= options["fill"] * capacity * 1000:
                break
            decision = framework.schedule_one(pod, snapshot)
            if decision.placement is not None:
                filled += pod.gpu_demand_milli
        warmup = [pod_json(pod) for pod in synthetic_pods(options["warmup"], seed=3)]
        timed = [pod_json(pod) for pod in synthetic_pods(options["requests"], seed=2)]
        names = list(snapshot.names)

        # The server runs in a child process (forked: it inherits this extender and its filled
        # snapshot), the client here, as kube-scheduler is another process; one keep-alive
        # connection with TCP_NODELAY, as kube-scheduler's Go client uses.
        token = secrets.token_urlsafe(32)
        token_file = Path(tempfile.mkdtemp(prefix="bench-extender-")) / "token"
        token_file.write_text(token + "\n")
        port = _serve_in_child(options["server"], str(token_file))
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
        connection = http.client.HTTPConnection("127.0.0.1", port.number, timeout=30)
        connection.connect()
        assert connection.sock is not None
        connection.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def post(path: str, body: bytes) -> tuple[int, bytes]:
            connection.request("POST", path, body, headers)
            response = connection.getresponse()
            return response.status, response.read()

        latencies: list[float] = []
        cold: list[float] = []
        cpu_start = 0.0
        passed = 0
        try:
            for k, pod_doc in enumerate(warmup + timed):
                body = json.dumps({"Pod": pod_doc, "Nodes": None, "NodeNames": names}).encode()
                t0 = time.perf_counter()
                status, data = post("/extender/filter", body)
                if status != 200:
                    raise CommandError(f"filter failed: {status} {data[:300]!r}")
                reply = json.loads(data)
                if reply["Error"]:
                    raise CommandError(f"filter failed: {reply['Error']}")
                feasible = reply["NodeNames"]
                body = json.dumps({"Pod": pod_doc, "Nodes": None, "NodeNames": feasible}).encode()
                status, data = post("/extender/prioritize", body)
                if status != 200:
                    raise CommandError(f"prioritize failed: {status} {data[:200]!r}")
                elapsed = time.perf_counter() - t0
                if k == len(warmup) - 1:
                    cpu_start = port.cpu_s()
                if k >= len(warmup):
                    latencies.append(elapsed * 1000)
                    passed += len(feasible)
                else:
                    cold.append(elapsed * 1000)
            server_cpu_s = port.cpu_s() - cpu_start
        finally:
            connection.close()
            os.kill(port.pid, signal.SIGTERM)
            os.waitpid(port.pid, 0)
            extender.install(None)
            shutil.rmtree(token_file.parent, ignore_errors=True)
        ms = np.array(latencies)
        report = {
            "server": options["server"],
            "nodes": options["nodes"],
            "gpus": capacity,
            "gpu_fill": round(filled / 1000 / capacity, 3),
            "requests": len(latencies),
            "mean_feasible_nodes": round(passed / max(1, len(latencies))),
            "p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "max_ms": round(float(ms.max()), 2),
            # What the server spent per filter + prioritize, whatever else shares the machine.
            "server_cpu_ms_per_pair": round(server_cpu_s * 1000 / max(1, len(latencies)), 2),
            "load_avg_1m": round(os.getloadavg()[0], 1),
            "warmup_requests": len(cold),
            "warmup_p99_ms": round(float(np.percentile(cold, 99)), 1) if cold else None,
            "snapshot_build_s": round(snapshot_s, 2),
            "register_s": round(register_s, 1),
        }
        if options["json"]:
            self.stdout.write(json.dumps(report))
        else:
            for key, value in report.items():
                self.stdout.write(f"{key}: {value}")
