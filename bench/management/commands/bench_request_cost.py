"""bench_request_cost: what another tenant's pending pods cost a tenant's `/api/v1/quota` and
`/api/v1/workloads/<name>/status` (issue 33: 0.08 s alone, 2.26 s with 35,000 pods pending, 11.2 s
with 200,000; the bound is 0.5 s with 30,000).

Seeds a tenant with one pending workload and another, sharing its ClusterQueue, with --pods
pending pods (workloads of 5,000), then times --requests requests of each route in-process (the
API's views, authentication and rendering; no web server), alone and with the crowd. Prints the
median and the slowest, in seconds; --json prints one JSON object.

Run it on a database of its own (it adds rows), migrated first:
  DATABASE_URL=postgres://.../bench python manage.py migrate
  DATABASE_URL=postgres://.../bench python manage.py bench_request_cost --json
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from rest_framework.test import APIClient

from api import services as api_services
from scheduling import services
from scheduling.core.types import Resources
from scheduling.models import Tenant
from scheduling.pod_template import PodTemplate

ROUTES = ("/api/v1/quota", "/api/v1/workloads/mine/status")
POD_SET = 5000


class Command(BaseCommand):
    help = "Time a tenant's /quota and /status with another tenant's pods pending."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--pods", type=int, default=30_000)
        parser.add_argument("--requests", type=int, default=20)
        parser.add_argument("--json", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if Tenant.objects.filter(name__in=("bench-mine", "bench-crowd")).exists():
            raise CommandError("the database has this benchmark's tenants: use a fresh one")
        mine, crowd = self._seed()
        alone = self._time(mine, options["requests"])
        template = PodTemplate(resources=Resources(cpu_milli=100, memory_mib=64))
        for k in range(-(-options["pods"] // POD_SET)):
            count = min(POD_SET, options["pods"] - k * POD_SET)
            services.workload_submit(
                tenant=crowd,
                name=f"crowd-{k}",
                queue_name="bench-crowd",
                pod_sets=[services.PodSetSpec(name="main", count=count, template=template)],
            )
        with connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {connection.ops.quote_name('scheduling_pod')}")
        crowded = self._time(mine, options["requests"])
        result = {
            "others_pending_pods": options["pods"],
            "database": connection.vendor,
            "seconds": {
                route: {"alone": alone[route], "crowded": crowded[route]} for route in ROUTES
            },
        }
        if options["json"]:
            self.stdout.write(json.dumps(result))
            return
        for route in ROUTES:
            self.stdout.write(
                f"{route}: alone median {alone[route]['median']:.3f} s, with "
                f"{options['pods']} pods of another tenant pending median "
                f"{crowded[route]['median']:.3f} s (slowest {crowded[route]['max']:.3f} s)"
            )

    def _seed(self) -> tuple[APIClient, Tenant]:
        tenant, _, token = api_services.tenant_onboard(
            name="bench-mine", quota={"nvidia.com/gpu": "8"}
        )
        crowd, _, _ = api_services.tenant_onboard(name="bench-crowd", cluster_queue="bench-mine")
        template = PodTemplate(resources=Resources(cpu_milli=1000, memory_mib=1024, gpus=8))
        services.workload_submit(
            tenant=tenant,
            name="mine",
            queue_name="bench-mine",
            pod_sets=[services.PodSetSpec(name="main", count=2, template=template)],
        )
        client = APIClient(HTTP_HOST="localhost")  # an allowed host of the default settings
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
        return client, crowd

    def _time(self, client: APIClient, requests: int) -> dict[str, dict[str, float]]:
        out = {}
        for route in ROUTES:
            took = []
            for _ in range(requests):
                started = time.perf_counter()
                response = client.get(route, secure=True)  # as the proxy in front forwards
                took.append(time.perf_counter() - started)
                if response.status_code != 200:
                    said = response.content[:300]
                    raise CommandError(f"{route}: {response.status_code} {said!r}")
            out[route] = {"median": statistics.median(took), "max": max(took)}
        return out
