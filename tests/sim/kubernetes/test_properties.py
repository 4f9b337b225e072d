"""Invariants of the store and its watches, for any sequence of writes: replaying a watch (with or
without a label selector) onto the list it started from gives exactly the list at the end, and
strategic merge keeps one condition per type with the last value written."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.kubernetes import controllers, patches, selectors
from sim.kubernetes.registry import Registry
from sim.kubernetes.resources import core
from sim.kubernetes.watch import WatchRequest, stream

MAPS = core("configmaps")
NAMES = st.sampled_from(["a", "b", "c", "d"])
TEAMS = st.sampled_from(["x", "y"])
OPERATIONS = st.lists(
    st.tuples(st.sampled_from(["create", "label", "delete"]), NAMES, TEAMS), max_size=25
)


def registry() -> Registry:
    api = Registry(clock=lambda: datetime(2026, 1, 5, tzinfo=UTC))
    controllers.install(api)
    api.create(core("namespaces"), "", {"metadata": {"name": "ns"}})
    return api


def apply(api: Registry, operation: tuple[str, str, str]) -> None:
    kind, name, team = operation
    exists = api.storage.get(MAPS, "ns", name) is not None
    if kind == "create" and not exists:
        api.create(MAPS, "ns", {"metadata": {"name": name, "labels": {"team": team}}})
    elif kind == "label" and exists:
        api.patch(MAPS, "ns", name, {"metadata": {"labels": {"team": team}}}, patches.MERGE)
    elif kind == "delete" and exists:
        api.delete(MAPS, "ns", name)


def snapshot(api: Registry, selector: str) -> dict[str, str]:
    page = api.list_page(MAPS, "ns", label_selector=selector)
    return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in page.items}


@settings(max_examples=40, deadline=None)
@given(before=OPERATIONS, after=OPERATIONS, selector=st.sampled_from(["", "team=x", "team!=x"]))
def test_a_watch_replayed_onto_its_list_gives_the_final_list(
    before: list[tuple[str, str, str]], after: list[tuple[str, str, str]], selector: str
) -> None:
    api = registry()
    for operation in before:
        apply(api, operation)
    state = snapshot(api, selector)
    since = api.storage.revision
    for operation in after:
        apply(api, operation)
    lines: list[bytes] = []
    request = WatchRequest(
        resource=MAPS,
        api_version="v1",
        namespace="ns",
        labels=selectors.parse_labels(selector),
        fields=(),
        since=since,
    )
    stream(api.storage, request, lines.append, linger_s=0.0)
    for line in lines:
        event = json.loads(line)
        meta = event["object"]["metadata"]
        if event["type"] == "DELETED":
            assert meta["name"] in state
            del state[meta["name"]]
        else:
            assert (event["type"] == "ADDED") == (meta["name"] not in state)
            state[meta["name"]] = meta["resourceVersion"]
    assert state == snapshot(api, selector)


CONDITION = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Ready", "PodScheduled", "DisruptionTarget"]),
        "status": st.sampled_from(["True", "False"]),
    }
)


@settings(max_examples=60, deadline=None)
@given(st.lists(CONDITION, max_size=12))
def test_strategic_merge_keeps_one_condition_per_type_with_the_last_value(
    written: list[dict[str, Any]],
) -> None:
    pod: dict[str, Any] = {"status": {}}
    for condition in written:
        pod = patches.strategic_merge(pod, {"status": {"conditions": [condition]}})
    expected = {c["type"]: c["status"] for c in written}
    found = pod["status"].get("conditions", [])
    assert {c["type"]: c["status"] for c in found} == expected
    assert len(found) == len(expected)
