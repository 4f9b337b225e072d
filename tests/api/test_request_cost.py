"""A tenant's requests cost what its own rows cost, not the cluster's (issue 33, item 3): another
tenant's 30,000 pending pods, in the same ClusterQueue, change neither the statements nor the pod
rows PostgreSQL reads for `/api/v1/quota` and `/api/v1/workloads/<name>/status` (it was 2.26 s
with 35,000 pods pending, every pending workload's pods replayed). Counted, not timed:
`manage.py bench_request_cost --json` prints the time."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from api.models import ApiToken
from scheduling import services
from scheduling.core.types import Resources
from scheduling.pod_template import PodTemplate
from tests.api.conftest import LLAMA, onboard, submit

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

OTHERS_PODS = 30_000
ROUTES = ("/api/v1/quota", "/api/v1/workloads/mine/status")


def rows_read(table: str) -> int:
    """Rows this transaction has read from `table` so far (scans and index fetches)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) "
            "FROM pg_stat_xact_user_tables WHERE relname = %s",
            [table],
        )
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def cost(client: Any, path: str) -> tuple[int, int]:
    """(statements, pod rows read) of one request. The token's last use is forgotten first, so
    every measured request includes its at-most-once-a-minute touch (one UPDATE): otherwise the
    crowded request included it only when writing the crowd took over a minute (a loaded machine)
    and was one statement dearer for the clock's sake, not the crowd's."""
    ApiToken.objects.update(last_used_at=None)
    before = rows_read("scheduling_pod")
    with CaptureQueriesContext(connection) as queries:
        response = client.get(path)
    assert response.status_code == 200, response.content
    return len(queries), rows_read("scheduling_pod") - before


@pytest.mark.slow  # 30,000 pods written first: 30-70 s on the shared 2-core machine
def test_another_tenants_30000_pending_pods_cost_a_tenants_quota_and_status_nothing(
    cluster: object,
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("rows read are PostgreSQL's statistics")
    mine = onboard("team-a", quota={"nvidia.com/gpu": "8"})
    others = onboard("team-b", cluster_queue="team-a")
    assert submit(mine, {**copy.deepcopy(LLAMA), "name": "mine"}).status_code == 201
    alone = {path: cost(mine.client, path) for path in ROUTES}

    template = PodTemplate(resources=Resources(cpu_milli=100, memory_mib=64))
    for k in range(OTHERS_PODS // 5000):
        services.workload_submit(
            tenant=others.tenant,
            name=f"crowd-{k}",
            queue_name="team-b",
            pod_sets=[services.PodSetSpec(name="main", count=5000, template=template)],
        )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE scheduling_pod")  # what autovacuum would have done by now
    crowded = {path: cost(mine.client, path) for path in ROUTES}

    for path in ROUTES:
        statements, pods = crowded[path]
        assert statements <= alone[path][0], (path, alone[path], crowded[path])
        assert pods <= alone[path][1] + 10, (path, alone[path], crowded[path])
    status = mine.client.get("/api/v1/workloads/mine/status").json()
    assert status["positionInClusterQueue"] == 1  # the crowd came later
