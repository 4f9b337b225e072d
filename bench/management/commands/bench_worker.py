"""`manage.py bench_worker`: the scheduling cycle with the database in the loop, on either side.

Builds a throwaway database (Django's test-database machinery, on whatever DATABASE_URL points at:
SQLite by default, PostgreSQL when set) and a synthetic cluster, then times
`SchedulingCycle.run_once()` until every pod is bound or waiting. Prints one JSON object.

- `--side database`: the nodes registered and the pods submitted through the services, 100 to a
  workload (`--pods-per-workload`);
- `--side kubernetes`: the nodes and the pods (schedulerName gpusched, as users create them) in
  the simulated Kubernetes API, served by a forked child process (as a real API server runs
  beside the scheduler); the timed cycles mirror them into the database (each pod its own
  workload, as Kueue makes plain pods) and bind each through the Binding API with the official
  client, from the binding process as `runkube` does (kube.binding_process): pods bound per
  second against the API server.

Besides pods per second and each phase's seconds: the scheduler's CPU milliseconds per pod bound
(`cpu_ms_per_pod`: this process's, every thread of it, and the binding process's, also given
alone as `binding_cpu_ms_per_pod`) and the first sync (`first_sync_s`: listing and mirroring
every node and pod, on the Kubernetes side); there, the API server's CPU milliseconds per pod bound
too (`server_cpu_ms_per_pod`: the forked child's, from /proc, over the same loop), and the events
over runkube's default rate limit, dropped as kube-scheduler drops them (`events_dropped`:
kube.api.EventBudget).
"""

from __future__ import annotations

import json
import os
import time
from contextlib import AbstractContextManager as ContextManager
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection

from bench.forked_kube import ForkedCluster, forked_cluster
from bench.loopback import process_cpu_seconds
from kube.api import CONNECTIONS, KubeApi
from kube.binding_process import Connection
from kube.side import KubernetesSide, kubernetes_cycle
from kube.translate import ANNOTATION_POLICY, ANNOTATION_SCOPE
from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.core.types import GPU_MILLI_RESOURCE, GPU_RESOURCE, PodRequest
from scheduling.models import Node, Pod
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import command_profile
from scheduling.worker.cache import ClusterCache
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.cycle_report import PHASES
from scheduling.worker.database_side import database_cycle
from sim.cluster import build_nodes, synthetic_pools
from sim.kubernetes.launch import SimulatedCluster
from sim.spec import ClusterSpec
from sim.workload import synthetic_pods

# The database side's workloads are submitted 100 pods each unless told otherwise; the pods of the
# Kubernetes side are plain pods, each its own workload as Kueue makes them: `--pods-per-workload
# 1` gives the database side as many workloads, to tell what the Kubernetes path costs from what
# the number of workloads costs.
PODS_PER_WORKLOAD = 100
SUBMITTED_AT_ONCE = 1_000  # workloads per transaction while the database side is set up


class Command(BaseCommand):
    help = "Measure pods placed and committed per second by the worker on the configured database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--pods", type=int, default=10_000)
        parser.add_argument("--batch", type=int, default=500)
        parser.add_argument("--profile", default="gpusched")
        parser.add_argument("--topology", default="mixed")
        parser.add_argument("--side", choices=("database", "kubernetes"), default="database")
        parser.add_argument("--pods-per-workload", type=int, default=PODS_PER_WORKLOAD)

    def handle(self, *args: Any, **options: Any) -> None:
        if options["pods_per_workload"] < 1:
            raise CommandError("--pods-per-workload must be at least 1")
        creation = connection.creation
        original = connection.settings_dict["NAME"]
        creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            self.stdout.write(json.dumps(self._run(options)))
        finally:
            creation.destroy_test_db(original, verbosity=0)

    def _run(self, options: dict[str, Any]) -> dict[str, Any]:
        framework = Framework(command_profile(options["profile"]))
        pools = synthetic_pools(options["nodes"], options["topology"])
        pods = list(synthetic_pods(options["pods"], seed=1))
        if options["side"] == "kubernetes":
            with kubernetes_cluster(ClusterSpec(pools=tuple(pools)), pods) as server:
                api = KubeApi(server.api_client(pool=CONNECTIONS), reporting_instance="bench")
                worker = kubernetes_cycle(
                    api,
                    framework,
                    None,
                    identity="bench",
                    batch_size=options["batch"],
                    cache=ClusterCache(freeze_long_lived=True),
                    binding_connection=Connection(host=server.url),
                )
                server_cpu_s = process_cpu_seconds(server.pid) or 0.0
                timed = self._time(worker, options)
                server_cpu_s = (process_cpu_seconds(server.pid) or 0.0) - server_cpu_s
                side = worker.side
                assert isinstance(side, KubernetesSide) and side.binder.process is not None
                binding_ms = side.binder.process.cpu_s() * 1000 / max(timed["bound"], 1)
                side.stop()
                server_ms = server_cpu_s * 1000 / max(timed["bound"], 1)
                return {
                    "side": "kubernetes",
                    **timed,
                    "cpu_ms_per_pod": round(timed["cpu_ms_per_pod"] + binding_ms, 3),
                    "binding_cpu_ms_per_pod": round(binding_ms, 3),
                    "server_cpu_ms_per_pod": round(server_ms, 3),
                    "events_dropped": api.event_budget.dropped,
                }
        for spec in build_nodes(pools):
            services.node_register(spec=spec, source=Node.Source.SIMULATOR)
        tenant = services.tenant_create(name="bench")
        size = options["pods_per_workload"]
        specs = [
            services.WorkloadSpec(
                tenant,
                f"bench-{start // size:05d}",
                [
                    services.PodSetSpec(
                        name=f"p{k}",
                        count=1,
                        template=PodTemplate(
                            resources=pod.resources,
                            topology_policy=pod.topology_policy,
                            topology_scope=pod.topology_scope,
                        ),
                    )
                    for k, pod in enumerate(pods[start : start + size])
                ],
            )
            for start in range(0, len(pods), size)
        ]
        for start in range(0, len(specs), SUBMITTED_AT_ONCE):
            services.workloads_submit(specs=specs[start : start + SUBMITTED_AT_ONCE])
        worker = database_cycle(
            framework, batch_size=options["batch"], cache=ClusterCache(freeze_long_lived=True)
        )
        return {"side": "database", "pods_per_workload": size, **self._time(worker, options)}

    def _time(self, worker: SchedulingCycle, options: dict[str, Any]) -> dict[str, Any]:
        """Every cycle until all pods are bound or wait, with the seconds of each phase; what
        no phase holds (`other_s`: the cycle's own bookkeeping and this loop) is reported too.
        `first_sync_s`: from the start until the first cycle that found the side synced had
        synced (the lists, and the first mirroring of every node and pod), and this process's CPU
        time until then (`first_sync_cpu_s`: what a loaded machine does not inflate as much);
        `cpu_ms_per_pod`: this process's CPU time (user + system, every thread) over the loop,
        per pod bound."""
        phases = [*(f"{phase}_s" for phase in PHASES), "estimate_s"]
        totals: dict[str, float] = {"cycles": 0, **dict.fromkeys(phases, 0.0)}
        first_sync_s: float | None = None
        first_sync_cpu_s = 0.0
        cpu_started = time.process_time()
        started = time.perf_counter()
        while True:
            report = worker.run_once()
            totals["cycles"] += 1
            for key in phases:
                totals[key] += getattr(report, key)
            if not report.synced:
                continue  # informers still listing
            if first_sync_s is None:
                first_sync_s = totals["sync_s"]
                first_sync_cpu_s = time.process_time() - cpu_started
            if (
                not report.attempted
                and not report.admitted
                and not any(report.side_counts.values())
            ):
                break
            if not report.more and not Pod.objects.filter(phase="Pending", last_reason="").exists():
                break
        seconds = time.perf_counter() - started
        cpu_s = time.process_time() - cpu_started
        bound = Pod.objects.filter(phase="Bound").count()
        totals["other_s"] = seconds - sum(totals[key] for key in phases)
        return {
            "database": connection.vendor,
            "nodes": options["nodes"],
            "pods": options["pods"],
            "bound": bound,
            "waiting": options["pods"] - bound,
            "seconds": round(seconds, 3),
            "pods_per_s": round(bound / seconds, 1),
            "cpu_ms_per_pod": round(cpu_s * 1000 / max(bound, 1), 3),
            "first_sync_s": round(first_sync_s or 0.0, 3),
            "first_sync_cpu_s": round(first_sync_cpu_s, 3),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            **{k: round(v, 3) if isinstance(v, float) else v for k, v in totals.items()},
        }


def kubernetes_cluster(spec: ClusterSpec, pods: list[PodRequest]) -> ContextManager[ForkedCluster]:
    """The simulated Kubernetes with the spec's nodes and the pods pending for gpusched (written
    straight into its store: what users created before the timing starts), served by a forked
    child (bench.forked_kube), without kubelets: bound pods stay bound."""

    def build(port: int) -> SimulatedCluster:
        cluster = SimulatedCluster.from_spec(
            spec, clock=lambda: datetime.now(UTC), port=port, watch_linger_s=0.0
        )
        cluster.kube.add_namespace("bench")
        for k, pod in enumerate(pods):
            cluster.kube.put("pods", pod_object(f"bench-{k:06d}", pod))
        return cluster

    return forked_cluster(build)


def pod_object(name: str, pod: PodRequest) -> dict[str, Any]:
    limits = {}
    if pod.gpus:
        limits[GPU_RESOURCE] = str(pod.gpus)
    if pod.gpu_milli:
        limits[GPU_MILLI_RESOURCE] = str(pod.gpu_milli)
    annotations = {ANNOTATION_POLICY: pod.topology_policy.value} if pod.topology_policy else {}
    if pod.topology_scope is not None:
        annotations[ANNOTATION_SCOPE] = pod.topology_scope.value
    requests = {"cpu": f"{pod.cpu_milli}m", "memory": f"{pod.memory_mib}Mi", **limits}
    return {
        "metadata": {"name": name, "namespace": "bench", "annotations": annotations},
        "spec": {
            "schedulerName": "gpusched",
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}],
        },
        "status": {"phase": "Pending"},
    }
