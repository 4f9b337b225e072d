"""Events are one storage served at events.k8s.io/v1 and core/v1, as in the API server: what one
version writes the other reads (renamed fields converted), core/v1 field selectors are the ones
`kubectl describe` sends, and each version validates as its own (core/v1: legacy rules)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from sim.kubernetes.simulated import SimulatedKubernetes
from tests.sim.kubernetes.helpers import client_for, pod, status

SCHEDULED: dict[str, Any] = {
    "metadata": {"generateName": "trainer."},
    "eventTime": "2026-01-05T09:00:00.250000Z",
    "reportingController": "gpusched.io/scheduler",
    "reportingInstance": "gpusched-0",
    "action": "Binding",
    "reason": "Scheduled",
    "type": "Normal",
    "note": "Successfully assigned ml-team/trainer to h100-0000",
}


def _scheduled(kube: SimulatedKubernetes, core: Any) -> tuple[str, Any]:
    uid = core.create_namespaced_pod("ml-team", pod("trainer")).metadata.uid
    regarding = {"kind": "Pod", "namespace": "ml-team", "name": "trainer", "uid": uid,
                 "apiVersion": "v1"}  # fmt: skip
    events = client_for(client.EventsV1Api, kube)
    return uid, events.create_namespaced_event("ml-team", {**SCHEDULED, "regarding": regarding})


def test_an_events_k8s_io_event_read_at_core_v1(kube: SimulatedKubernetes, core: Any) -> None:
    uid, created = _scheduled(kube, core)
    # What kubectl describe pod asks:
    involved = {"name": "trainer", "namespace": "ml-team", "uid": uid}
    selector = ",".join(f"involvedObject.{k}={v}" for k, v in involved.items())
    (event,) = core.list_namespaced_event("ml-team", field_selector=selector).items
    assert event.metadata.name == created.metadata.name
    assert event.metadata.resource_version == created.metadata.resource_version
    assert (event.involved_object.kind, event.involved_object.uid) == ("Pod", uid)
    assert event.message == SCHEDULED["note"] and event.reason == "Scheduled"
    assert event.reporting_component == "gpusched.io/scheduler"
    assert event.first_timestamp is None and event.count is None
    assert core.list_namespaced_event("ml-team", field_selector="involvedObject.name=x").items == []
    assert len(core.list_event_for_all_namespaces(field_selector="reason=Scheduled").items) == 1
    with pytest.raises(ApiException) as raised:
        core.list_namespaced_event("ml-team", field_selector="note=x")
    assert status(raised.value)["message"] == "field label not supported: note"


def test_a_core_v1_event_as_client_gos_recorder_writes_it(
    kube: SimulatedKubernetes, core: Any
) -> None:
    body = {
        "metadata": {"name": "trainer.17f0"},
        "involvedObject": {"kind": "Pod", "namespace": "ml-team", "name": "trainer"},
        "reason": "Pulled",
        "message": "Container image already present on machine",
        "source": {"component": "kubelet", "host": "h100-0000"},
        "firstTimestamp": "2026-01-05T09:00:00Z",
        "lastTimestamp": "2026-01-05T09:00:00Z",
        "count": 1,
        "type": "Normal",
    }
    core.create_namespaced_event("ml-team", body)
    (stored,) = kube.events
    assert stored["regarding"]["name"] == "trainer" and stored["note"] == body["message"]
    assert stored["deprecatedSource"] == {"component": "kubelet", "host": "h100-0000"}
    assert stored["deprecatedCount"] == 1
    # The recorder's correlator patches the count and lastTimestamp of a repeated event.
    patch = {"count": 2, "lastTimestamp": "2026-01-05T09:01:00Z"}
    patched = core.patch_namespaced_event("trainer.17f0", "ml-team", patch)
    assert (patched.count, patched.source.component) == (2, "kubelet")
    assert kube.events[0]["deprecatedLastTimestamp"] == "2026-01-05T09:01:00Z"
    (found,) = core.list_namespaced_event("ml-team", field_selector="source=kubelet").items
    assert found.metadata.name == "trainer.17f0"


def test_core_v1_validates_as_the_legacy_api_does(core: Any) -> None:
    elsewhere = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "namespace": "other", "name": "x"},
        "reason": "R",
    }
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_event("ml-team", elsewhere)
    doc = status(raised.value)
    assert raised.value.status == 422
    assert doc["details"]["causes"][0]["field"] == "involvedObject.namespace"
    involved = {"kind": "Pod", "namespace": "ml-team", "name": "x"}
    new_style = {"metadata": {"name": "n"}, "eventTime": SCHEDULED["eventTime"],
                 "involvedObject": involved}  # fmt: skip
    with pytest.raises(ApiException) as raised:
        core.create_namespaced_event("ml-team", new_style)
    fields = {c["field"] for c in status(raised.value)["details"]["causes"]}
    assert fields == {"reportingController", "reportingInstance", "action", "reason"}


def test_a_core_v1_watch_sees_events_k8s_io_writes(kube: SimulatedKubernetes, core: Any) -> None:
    since = core.list_namespaced_event("ml-team").metadata.resource_version
    _scheduled(kube, core)
    stream = watch.Watch().stream(
        core.list_namespaced_event, "ml-team", resource_version=since, timeout_seconds=1
    )
    (event,) = [e for e in stream if e["type"] == "ADDED"]
    assert event["object"].message == SCHEDULED["note"]
    assert event["object"].involved_object.name == "trainer"
