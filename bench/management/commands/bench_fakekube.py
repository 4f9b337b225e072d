"""`manage.py bench_fakekube`: how fast the simulated Kubernetes answers the official client, so
that scheduling throughput measured through it (pods bound per second) is the scheduler's and not
the simulator's.

The simulated cluster (API server and kubelets, `--nodes` servers of the "mixed" fleet) runs in a
forked child process, as a real API server runs beside its clients. The benchmark process then,
with `--clients` threads of the official client (one ApiClient each):
1. creates `--pods` pods (one GPU each) -> `create_per_s`;
2. lists them all, 500 a page -> `list_all_ms`;
3. starts `--watchers` watches on all pods from that list's resourceVersion;
4. binds every pod with a Binding, nodes round-robin -> `bind_per_s` (pods bound per second);
5. waits until every watcher has seen every pod bound -> `watch_lag_ms` after the last bind.
`server_cpu_ms_per_bind` is the child's CPU time (from /proc) over phase 4, per Binding (the
kubelets start the bound pods meanwhile, so it includes their status writes).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from kubernetes import client, watch

from bench.forked_kube import ForkedCluster, forked_cluster
from bench.loopback import process_cpu_seconds
from sim.cluster import synthetic_pools
from sim.kubernetes.launch import SimulatedCluster, SpeedClock
from sim.spec import ClusterSpec

NAMESPACE = "bench"


def _build(nodes: int) -> Callable[[int], SimulatedCluster]:
    def build(port: int) -> SimulatedCluster:
        spec = ClusterSpec(pools=tuple(synthetic_pools(nodes, "mixed")))
        simulated = SimulatedCluster.from_spec(spec, clock=SpeedClock(1.0), port=port)
        simulated.kube.add_namespace(NAMESPACE)
        return simulated

    return build


class Command(BaseCommand):
    help = "Measure the simulated Kubernetes API through the official client (JSON)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--pods", type=int, default=5000)
        parser.add_argument("--clients", type=int, default=4)
        parser.add_argument("--watchers", type=int, default=4)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        with forked_cluster(_build(options["nodes"]), kubelets_every_s=0.2) as server:
            result = self._measure(server, **options)
        text = json.dumps(result, indent=None if options["json"] else 2)
        self.stdout.write(text)

    def _measure(self, server: ForkedCluster, **options: Any) -> dict[str, Any]:
        pods, clients = options["pods"], options["clients"]
        # Raw responses (`_preload_content=False`), which the client's typed signatures do not say.
        apis: list[Any] = [client.CoreV1Api(server.api_client(pool=4)) for _ in range(clients)]
        listing = json.loads(apis[0].list_node(_preload_content=False).data)
        nodes = [n["metadata"]["name"] for n in listing["items"]]
        names = [f"p-{k:06d}" for k in range(pods)]

        def create(k: int) -> None:
            body = {
                "metadata": {"name": names[k]},
                "spec": {
                    "schedulerName": "gpusched",
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            }
            apis[k % clients].create_namespaced_pod(NAMESPACE, body, _preload_content=False)

        def bind(k: int) -> None:
            target = client.V1ObjectReference(kind="Node", name=nodes[k % len(nodes)])
            body = client.V1Binding(metadata=client.V1ObjectMeta(name=names[k]), target=target)
            apis[k % clients].create_namespaced_pod_binding(
                names[k], NAMESPACE, body, _preload_content=False
            )

        with ThreadPoolExecutor(clients) as pool:
            started = time.perf_counter()
            list(pool.map(create, range(pods)))
            create_s = time.perf_counter() - started

            started = time.perf_counter()
            token, version, listed = None, "", 0
            while True:
                page = json.loads(
                    apis[0]
                    .list_namespaced_pod(
                        NAMESPACE, limit=500, _continue=token, _preload_content=False
                    )
                    .data
                )
                listed += len(page["items"])
                version = page["metadata"]["resourceVersion"]
                token = page["metadata"].get("continue")
                if not token:
                    break
            list_s = time.perf_counter() - started

            seen = [set[str]() for _ in range(options["watchers"])]
            done = threading.Barrier(options["watchers"] + 1)
            for index in range(options["watchers"]):
                threading.Thread(
                    target=_watch, args=(server, version, pods, seen[index], done), daemon=True
                ).start()
            time.sleep(0.5)  # the watches are open
            cpu_before = process_cpu_seconds(server.pid) or 0.0
            started = time.perf_counter()
            list(pool.map(bind, range(pods)))
            bind_s = time.perf_counter() - started
            cpu_s = (process_cpu_seconds(server.pid) or 0.0) - cpu_before
            bound_at = time.perf_counter()
            done.wait(timeout=300)
            lag_s = time.perf_counter() - bound_at
        return {
            "date": datetime.now(UTC).isoformat(timespec="minutes"),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "nodes": len(nodes),
            "pods": pods,
            "listed": listed,
            "clients": clients,
            "watchers": options["watchers"],
            "create_per_s": round(pods / create_s, 1),
            "list_all_ms": round(list_s * 1000, 1),
            "bind_per_s": round(pods / bind_s, 1),
            "watch_lag_ms": round(lag_s * 1000, 1),
            "all_watchers_saw_all": all(len(s) == pods for s in seen),
            "server_cpu_ms_per_bind": round(cpu_s * 1000 / pods, 3),
        }


def _watch(
    server: ForkedCluster, version: str, pods: int, seen: set[str], done: threading.Barrier
) -> None:
    api = client.CoreV1Api(server.api_client(pool=4))
    stream = watch.Watch()
    for event in stream.stream(
        api.list_namespaced_pod,
        NAMESPACE,
        resource_version=version,
        timeout_seconds=600,
        deserialize=False,
    ):
        obj = event["object"]
        if (obj.get("spec") or {}).get("nodeName"):
            seen.add(obj["metadata"]["name"])
        if len(seen) == pods:
            stream.stop()
    done.wait(timeout=300)
