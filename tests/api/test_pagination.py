"""Every list the API answers with is paged (issue 33, item 3): a list that grows with tenants,
their workloads, pods, tokens or queues costs a request at most `limit` (<= 500) items. The schema
says so for every operation answering `items`, and walking each list a page of one at a time gives
back the whole list, once each."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from api import services as api_services
from scheduling import services
from scheduling.core.queueing.kueue_objects import parse_documents
from tests.api.conftest import LLAMA, Caller, onboard, run_scheduler, submit

# Lists of a fixed few, not paged: the per-GPU-model capacity beside the flavors (one per model).
NOT_PAGED = {("/api/v1/flavors", "gpuModels")}


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["components"]["schemas"][node["$ref"].rsplit("/", 1)[1]]
    return node


def list_operations() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(path, operation, its 200 response's properties) of every GET answering a list."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    found = []
    for path, item in schema["paths"].items():
        operation = item.get("get")
        if operation is None or "200" not in operation["responses"]:
            continue
        content = operation["responses"]["200"].get("content", {}).get("application/json")
        if content is None:
            continue
        body = _resolve(schema, content["schema"])
        properties = body.get("properties", {})
        lists = [
            name
            for name, field in properties.items()
            if _resolve(schema, field).get("type") == "array"
            and (path, name) not in NOT_PAGED
            and "items" in properties
        ]
        if lists:
            found.append((path, operation, properties))
    return found


def test_every_list_in_the_schema_is_paged() -> None:
    operations = list_operations()
    assert len(operations) >= 13, [path for path, _, _ in operations]
    for path, operation, properties in operations:
        parameters = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
        assert {"limit", "cursor"} <= parameters, path
        assert "nextCursor" in properties, path
        lists = [name for name in properties if name == "items"]
        assert lists == ["items"], path


@pytest.fixture
def populated(admin: APIClient, cluster: object) -> tuple[Caller, APIClient]:
    services.queues_apply(
        config=parse_documents(
            list(
                yaml.safe_load_all(
                    "kind: WorkloadPriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\n"
                    "kind: WorkloadPriorityClass\nmetadata: {name: low}\nvalue: 10"
                )
            )
        )
    )
    team = onboard("team-a", quota={"nvidia.com/gpu": "8"})
    onboard("team-b", quota={"nvidia.com/gpu": "8"})
    api_services.token_create(tenant=team.tenant, name="second")
    for k in range(3):  # one admitted (8 GPUs), two waiting for quota
        assert submit(team, {**copy.deepcopy(LLAMA), "name": f"llama-{k}"}).status_code == 201
    run_scheduler()
    return team, admin


TENANT_LISTS = [
    ("/api/v1/workloads", 3),
    ("/api/v1/queues", 1),
    ("/api/v1/queues/team-a/pendingworkloads", 2),
    ("/api/v1/flavors", 1),
    ("/api/v1/priorityclasses", 2),
    ("/api/v1/workloads/llama-0/pods", 2),
    ("/api/v1/workloads/llama-0/placements", 2),
]
ADMIN_LISTS = [
    ("/api/v1/admin/tenants", 2),
    ("/api/v1/admin/tenants/team-a/tokens", 2),
    ("/api/v1/admin/localqueues", 2),
    ("/api/v1/admin/clusterqueues", 2),
    ("/api/v1/admin/cohorts", 0),
    ("/api/v1/admin/nodes", 4),
]


def walk(client: APIClient, path: str) -> list[Any]:
    items: list[Any] = []
    cursor = None
    for _ in range(100):
        query = {"limit": 1} if cursor is None else {"limit": 1, "cursor": cursor}
        response = client.get(path, query)
        assert response.status_code == 200, (path, response.json())
        page = response.json()
        assert len(page["items"]) <= 1, path
        items += page["items"]
        cursor = page["nextCursor"]
        if cursor is None:
            return items
    raise AssertionError(f"{path}: no end after 100 pages")


@pytest.mark.parametrize(("path", "least"), TENANT_LISTS + ADMIN_LISTS)
def test_each_list_walked_a_page_at_a_time_is_the_whole_list(
    populated: tuple[Caller, APIClient], path: str, least: int
) -> None:
    team, admin = populated
    client = admin if path.startswith("/api/v1/admin/") else team.client
    whole = client.get(path, {"limit": 500}).json()
    assert whole["nextCursor"] is None and len(whole["items"]) >= least, whole
    assert walk(client, path) == whole["items"]


def test_every_paged_list_of_the_schema_is_walked_here() -> None:
    walked = {path for path, _ in TENANT_LISTS + ADMIN_LISTS}
    for path, _, _ in list_operations():
        concrete = (
            path.replace("{name}", "team-a")
            if "queues/" in path or "tenants/" in path
            else path.replace("{name}", "llama-0")
        )
        assert concrete in walked, path
