"""bench_api: load benchmark of the REST API through the web process (`runweb`) on loopback.

Seeds one tenant with --workloads workloads (through the services, as the API would), starts
the web process on a free loopback port with throttling off, then drives it with --concurrency
keep-alive HTTP/1.1 clients for --seconds per scenario: listing (GET /api/v1/workloads?limit=50,
the first page and pages further on by cursor) and submitting (POST /api/v1/workloads). Prints
requests/s and latency percentiles per scenario; --json prints one JSON object.

Run it on a database of its own (it adds rows): e.g.
  DATABASE_URL=sqlite:///var/bench-api.sqlite3 python manage.py migrate
  DATABASE_URL=sqlite:///var/bench-api.sqlite3 python manage.py bench_api --json
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from django.core.management.base import BaseCommand, CommandError, CommandParser

from api import services as api_services
from bench.web_process import web_server
from scheduling import services
from scheduling.core.types import Resources
from scheduling.models import Node
from scheduling.pod_template import PodTemplate
from sim.cluster import build_nodes, synthetic_pools

Request = Callable[[http.client.HTTPConnection, int], int]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[min(len(ordered) - 1, max(0, int(round(q * len(ordered) + 0.5)) - 1))]


class Command(BaseCommand):
    help = "Load-test the REST API (list and submit) through the web process on loopback."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--workloads", type=int, default=10_000)
        parser.add_argument("--nodes", type=int, default=100)
        parser.add_argument(
            "--concurrency", default="1,4", help="clients, comma-separated: one run per value"
        )
        parser.add_argument("--seconds", type=float, default=20.0)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        token = self._seed(options["workloads"], options["nodes"])
        environment = {
            "GPUSCHED_DEBUG": "0",  # debug would slow every request
            "GPUSCHED_SECURE_SSL_REDIRECT": "0",  # plain HTTP on loopback, as compose serves it
            "GPUSCHED_API_RATE": "1000000/second",
            "GPUSCHED_API_SUBMIT_RATE": "1000000/second",
            "GPUSCHED_LOG_LEVEL": "WARNING",
        }
        try:
            with web_server(environment=environment) as base:
                port = int(urlsplit(base).port or 0)
                headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
                cursor = self._cursor(port, headers)
                results = {}
                for clients in [int(c) for c in str(options["concurrency"]).split(",")]:
                    run = {**options, "clients": clients}
                    results[f"list_first_page@{clients}"] = self._drive(
                        port, headers, run, self._list(None)
                    )
                    results[f"list_by_cursor@{clients}"] = self._drive(
                        port, headers, run, self._list(cursor)
                    )
                    results[f"submit@{clients}"] = self._drive(port, headers, run, self._submit())
        except RuntimeError as exc:  # the web process did not start
            raise CommandError(str(exc)) from exc
        doc = {
            "workloads_seeded": options["workloads"],
            "nodes": options["nodes"],
            "concurrency": options["concurrency"],
            "seconds_per_scenario": options["seconds"],
            "server": "runweb (uvicorn, ASGI), one process",
            "results": results,
        }
        if options["json"]:
            self.stdout.write(json.dumps(doc, indent=2))
            return
        for name, r in results.items():
            self.stdout.write(
                f"{name:20} {r['requests_per_s']:8.1f} req/s  p50 {r['p50_ms']:6.1f} ms  "
                f"p95 {r['p95_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms  errors {r['errors']}"
            )

    def _seed(self, workloads: int, nodes: int) -> str:
        for spec in build_nodes(synthetic_pools(nodes, "mixed")):
            services.node_register(spec=spec, source=Node.Source.SIMULATOR)
        name = f"bench-{int(time.time())}"
        tenant, _, token = api_services.tenant_onboard(name=name)
        template = PodTemplate(resources=Resources(cpu_milli=4000, memory_mib=16384, gpus=1))
        for k in range(workloads):
            services.workload_submit(
                tenant=tenant,
                name=f"seed-{k}",
                queue_name=name,
                pod_sets=[services.PodSetSpec(name="main", count=1, template=template)],
            )
        return token

    def _cursor(self, port: int, headers: dict[str, str]) -> str:
        """A cursor about half way down the list."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        cursor = ""
        for _ in range(10):
            path = "/api/v1/workloads?limit=500" + (f"&cursor={cursor}" if cursor else "")
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            body = response.read()
            if response.status != 200:
                raise CommandError(f"GET {path}: {response.status} {body[:200]!r}")
            cursor = json.loads(body)["nextCursor"] or cursor
        conn.close()
        return cursor

    def _list(self, cursor: str | None) -> Callable[[dict[str, str]], Request]:
        path = "/api/v1/workloads?limit=50" + (f"&cursor={cursor}" if cursor else "")

        def make(headers: dict[str, str]) -> Request:
            def call(conn: http.client.HTTPConnection, k: int) -> int:
                conn.request("GET", path, headers=headers)
                response = conn.getresponse()
                response.read()
                return response.status

            return call

        return make

    def _submit(self) -> Callable[[dict[str, str]], Request]:
        def make(headers: dict[str, str]) -> Request:
            def call(conn: http.client.HTTPConnection, k: int) -> int:
                body = {
                    "name": f"load-{threading.get_ident()}-{k}",
                    "serviceClass": "batch",
                    "podSets": [
                        {
                            "name": "workers",
                            "count": 2,
                            "template": {
                                "resources": {
                                    "requests": {
                                        "cpu": "4",
                                        "memory": "16Gi",
                                        "nvidia.com/gpu": "1",
                                    }
                                }
                            },
                        }
                    ],
                }
                conn.request("POST", "/api/v1/workloads", body=json.dumps(body), headers=headers)
                response = conn.getresponse()
                response.read()
                return response.status

            return call

        return make

    def _drive(
        self,
        port: int,
        headers: dict[str, str],
        options: dict[str, Any],
        make: Callable[[dict[str, str]], Request],
    ) -> dict[str, Any]:
        latencies: list[float] = []
        errors = 0
        lock = threading.Lock()
        stop = time.monotonic() + options["seconds"]

        def worker(index: int) -> None:
            index += options["clients"] * 1000  # distinct submit names across runs
            nonlocal errors
            call = make(headers)
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            k = 0
            mine: list[float] = []
            failed = 0
            while time.monotonic() < stop:
                started = time.perf_counter()
                try:
                    code = call(conn, index * 10_000_000 + k)
                except (OSError, http.client.HTTPException):
                    conn.close()
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                    code = 599
                mine.append(time.perf_counter() - started)
                failed += code >= 400
                k += 1
            conn.close()
            with lock:
                latencies.extend(mine)
                errors += failed

        began = time.perf_counter()
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(options["clients"])]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - began
        ms = [v * 1000 for v in latencies]
        return {
            "requests": len(ms),
            "errors": errors,
            "requests_per_s": round(len(ms) / elapsed, 1),
            "p50_ms": round(_percentile(ms, 0.50), 2),
            "p95_ms": round(_percentile(ms, 0.95), 2),
            "p99_ms": round(_percentile(ms, 0.99), 2),
        }
