"""Watches and paged lists through `kubernetes.watch.Watch` and the typed client: resume from a
resourceVersion, initial events, selector exits, 410 after compaction, bookmarks, paging."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import pod


def events(func: Any, *args: Any, count: int, **kwargs: Any) -> list[dict[str, Any]]:
    """The first `count` events of a watch (it times out after 2 s if fewer come)."""
    stream = watch.Watch()
    found = []
    for event in stream.stream(func, *args, timeout_seconds=2, **kwargs):
        found.append(event)
        if len(found) == count:
            stream.stop()
    return found


def test_a_watch_resumes_after_the_resource_version_of_a_list(core: Any) -> None:
    core.create_namespaced_pod("ml-team", pod("before"))
    version = core.list_namespaced_pod("ml-team").metadata.resource_version
    core.create_namespaced_pod("ml-team", pod("p1"))
    core.patch_namespaced_pod("p1", "ml-team", {"metadata": {"labels": {"a": "b"}}})
    core.delete_namespaced_pod("p1", "ml-team")  # not bound: deleted at once

    seen = events(core.list_namespaced_pod, "ml-team", count=3, resource_version=version)

    assert [(e["type"], e["object"].metadata.name) for e in seen] == [
        ("ADDED", "p1"),
        ("MODIFIED", "p1"),
        ("DELETED", "p1"),
    ]
    versions = [int(e["object"].metadata.resource_version) for e in seen]
    assert versions == sorted(versions) and versions[0] > int(version)


def test_a_watch_without_a_version_starts_with_the_current_objects(
    core: Any,
) -> None:
    core.create_namespaced_pod("ml-team", pod("a"))
    core.create_namespaced_pod("ml-team", pod("b"))
    seen = events(core.list_namespaced_pod, "ml-team", count=2)
    assert sorted((e["type"], e["object"].metadata.name) for e in seen) == [
        ("ADDED", "a"),
        ("ADDED", "b"),
    ]


def test_an_object_leaving_the_field_selector_arrives_deleted_with_its_previous_content(
    kube: SimulatedKubernetes, core: Any
) -> None:
    kube.add_pod({**pod("job", metadata={"namespace": "ml-team"}), "status": {"phase": "Running"}})
    version = core.list_namespaced_pod("ml-team").metadata.resource_version
    kube.update_pod("ml-team", "job", lambda p: p["status"].update(phase="Succeeded"))

    (event,) = events(
        core.list_namespaced_pod,
        "ml-team",
        count=1,
        resource_version=version,
        field_selector="status.phase!=Succeeded,status.phase!=Failed",
    )

    assert event["type"] == "DELETED"
    assert event["raw_object"]["status"]["phase"] == "Running"  # what the watcher last matched
    current = core.read_namespaced_pod("job", "ml-team")
    assert event["object"].metadata.resource_version == current.metadata.resource_version


def test_an_object_entering_a_label_selector_arrives_added(core: Any) -> None:
    core.create_namespaced_pod("ml-team", pod("p"))
    version = core.list_namespaced_pod("ml-team").metadata.resource_version
    core.patch_namespaced_pod("p", "ml-team", {"metadata": {"labels": {"tier": "gpu"}}})
    (event,) = events(
        core.list_namespaced_pod,
        "ml-team",
        count=1,
        resource_version=version,
        label_selector="tier in (gpu,cpu)",
    )
    assert (event["type"], event["object"].metadata.labels) == ("ADDED", {"tier": "gpu"})


def test_a_watch_from_a_compacted_version_gets_410_expired(
    kube: SimulatedKubernetes, core: Any
) -> None:
    version = core.list_namespaced_pod("ml-team").metadata.resource_version
    core.create_namespaced_pod("ml-team", pod("p"))
    kube.compact()
    with pytest.raises(ApiException) as caught:
        events(core.list_namespaced_pod, "ml-team", count=1, resource_version=version)
    assert caught.value.status == 410
    assert (
        caught.value.reason == f"Expired: too old resource version: {version} ({int(version) + 1})"
    )


def test_a_watch_that_times_out_ends_with_a_bookmark_of_the_newest_version(
    core: Any,
) -> None:
    version = core.list_namespaced_pod("ml-team").metadata.resource_version
    core.create_namespaced_pod("ml-team", pod("p"))
    core.create_namespace({"metadata": {"name": "other"}})  # moves the cluster's version on
    raw = list(
        watch.Watch().stream(
            core.list_namespaced_pod,
            "ml-team",
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=1,
            deserialize=False,
        )
    )
    assert [e["type"] for e in raw] == ["ADDED", "BOOKMARK"]
    newest = core.read_namespace("other").metadata.resource_version
    assert raw[-1]["object"]["metadata"]["resourceVersion"] == newest


def test_two_watchers_see_the_same_events(core: Any) -> None:
    version = core.list_namespaced_pod("ml-team").metadata.resource_version
    for name in ("a", "b", "c"):
        core.create_namespaced_pod("ml-team", pod(name))
    first = events(core.list_namespaced_pod, "ml-team", count=3, resource_version=version)
    second = events(core.list_pod_for_all_namespaces, count=3, resource_version=version)
    assert [e["raw_object"] for e in first] == [e["raw_object"] for e in second]


def test_paging_serves_one_consistent_snapshot(kube: SimulatedKubernetes, core: Any) -> None:
    for k in range(5):
        core.create_namespaced_pod("ml-team", pod(f"p{k}"))
    first = core.list_namespaced_pod("ml-team", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    core.create_namespaced_pod("ml-team", pod("p2a"))  # after the snapshot: not in its pages
    core.delete_namespaced_pod("p4", "ml-team")
    names, token = [], first.metadata._continue
    while token:
        page = core.list_namespaced_pod("ml-team", limit=2, _continue=token)
        assert page.metadata.resource_version == first.metadata.resource_version
        names += [p.metadata.name for p in page.items]
        token = page.metadata._continue
    assert names == ["p2", "p3", "p4"]
    assert len(core.list_namespaced_pod("ml-team").items) == 5
