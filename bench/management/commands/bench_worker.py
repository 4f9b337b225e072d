"""`manage.py bench_worker`: the scheduling worker with the database in the loop.

Builds a throwaway database (Django's test-database machinery, on whatever DATABASE_URL points at:
SQLite by default, PostgreSQL when set), registers a synthetic cluster, submits pods, then times
`SchedulingCycle.run_once()` until every pod is bound or waiting. Prints one JSON object.
"""

from __future__ import annotations

import json
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from scheduling import services
from scheduling.core.scheduler import Framework
from scheduling.database_side import database_cycle
from scheduling.models import Pod
from scheduling.pod_template import PodTemplate
from scheduling.profile_files import command_profile
from sim.cluster import build_nodes, synthetic_pools
from sim.workload import synthetic_pods

PODS_PER_WORKLOAD = 100


class Command(BaseCommand):
    help = "Measure pods placed and committed per second by the worker on the configured database."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--nodes", type=int, default=1000)
        parser.add_argument("--pods", type=int, default=10_000)
        parser.add_argument("--batch", type=int, default=500)
        parser.add_argument("--profile", default="gpusched")
        parser.add_argument("--topology", default="mixed")

    def handle(self, *args: Any, **options: Any) -> None:
        creation = connection.creation
        original = connection.settings_dict["NAME"]
        creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
        try:
            self.stdout.write(json.dumps(self._run(options)))
        finally:
            creation.destroy_test_db(original, verbosity=0)

    def _run(self, options: dict[str, Any]) -> dict[str, Any]:
        for spec in build_nodes(synthetic_pools(options["nodes"], options["topology"])):
            services.node_register(spec=spec)
        tenant = services.tenant_create(name="bench")
        pods = list(synthetic_pods(options["pods"], seed=1))
        for start in range(0, len(pods), PODS_PER_WORKLOAD):
            chunk = pods[start : start + PODS_PER_WORKLOAD]
            services.workload_submit(
                tenant=tenant,
                name=f"bench-{start // PODS_PER_WORKLOAD:05d}",
                pod_sets=[
                    services.PodSetSpec(
                        name=f"p{k}",
                        count=1,
                        template=PodTemplate(
                            cpu_milli=pod.cpu_milli,
                            memory_mib=pod.memory_mib,
                            gpus=pod.gpus,
                            gpu_milli=pod.gpu_milli,
                            topology_policy=pod.topology_policy,
                            topology_scope=pod.topology_scope,
                        ),
                    )
                    for k, pod in enumerate(chunk)
                ],
            )
        worker = database_cycle(
            Framework(command_profile(options["profile"])), batch_size=options["batch"]
        )
        totals = {"cycles": 0, "snapshot_s": 0.0, "schedule_s": 0.0, "commit_s": 0.0}
        started = time.perf_counter()
        while True:
            report = worker.run_once()
            totals["cycles"] += 1
            for key in ("snapshot_s", "schedule_s", "commit_s"):
                totals[key] += getattr(report, key)
            if not report.attempted and not report.admitted:
                break
            if not report.more and not Pod.objects.filter(phase="Pending", last_reason="").exists():
                break
        seconds = time.perf_counter() - started
        bound = Pod.objects.filter(phase="Bound").count()
        return {
            "database": connection.vendor,
            "nodes": options["nodes"],
            "pods": options["pods"],
            "bound": bound,
            "waiting": options["pods"] - bound,
            "seconds": round(seconds, 3),
            "pods_per_s": round(bound / seconds, 1),
            **{k: round(v, 3) if isinstance(v, float) else v for k, v in totals.items()},
        }
