"""A pod set's constraints (node selector, tolerations, GPU models) are stored once, not once per
pod (issue 33, item 2): one 135 KB submit of 5,000 pods with the largest constraints the API
accepts stored 134 MB when every pod row had its own copy. Past their limits they are refused
with a 400 naming the limit (docs/security.md)."""

from __future__ import annotations

import copy
import json

import pytest
from django.db import connection

from scheduling.models import Pod, PodConstraints, Workload
from tests.api.conftest import LLAMA, submit
from tests.scheduling.worker.test_pending_bounded import MAXIMAL_SELECTOR, MAXIMAL_TOLERATIONS

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def test_a_submit_of_5000_pods_with_maximal_constraints_stores_them_once(team_a, cluster) -> None:
    template = {
        "resources": {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"}},
        "gpuModels": ["H100"],
        "nodeSelector": MAXIMAL_SELECTOR,
        "tolerations": MAXIMAL_TOLERATIONS,
    }
    body = {
        "name": "wide",
        "queueName": "team-a",
        "podSets": [{"name": f"set-{k}", "count": 1000, "template": template} for k in range(5)],
    }
    assert 100_000 < len(json.dumps(body)) < 200_000  # the probe's 135 KB request
    response = submit(team_a, body)
    assert response.status_code == 201, response.json()
    assert Pod.objects.count() == 5000
    (row,) = PodConstraints.objects.all()  # one row for the five identical pod sets
    assert row.node_selector == MAXIMAL_SELECTOR
    assert row.tolerations == [{**t, "effect": ""} for t in MAXIMAL_TOLERATIONS]
    assert set(Pod.objects.values_list("constraints_id", flat=True)) == {row.pk}
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT sum(pg_column_size(p.*)) FROM scheduling_pod p")
            (pod_bytes,) = cursor.fetchone()
            cursor.execute("SELECT sum(pg_column_size(c.*)) FROM scheduling_podconstraints c")
            (constraint_bytes,) = cursor.fetchone()
        assert pod_bytes < 5000 * 1024  # was 134 MB: each pod row its own ~27 KB copy
        assert constraint_bytes < 64 * 1024


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("nodeSelector", {f"k{k}": "v" for k in range(33)}, "at most 32 entries (got 33)"),
        ("tolerations", [{"key": f"k{k}", "operator": "Exists"} for k in range(33)], "32"),
    ],
)
def test_constraints_past_their_limits_are_a_400_naming_the_limit(
    team_a, cluster, field: str, value: object, words: str
) -> None:
    doc = copy.deepcopy(LLAMA)
    doc["podSets"][0]["template"][field] = value
    response = submit(team_a, doc)
    assert response.status_code == 400, response.json()
    fields = response.json()["extra"]["fields"]
    (path,) = [p for p in fields if p.startswith(f"podSets[0].template.{field}")]
    assert words in " ".join(fields[path])
    assert not Workload.objects.exists() and not PodConstraints.objects.exists()
