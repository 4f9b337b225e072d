"""The experiments' worlds report what their cluster complained about: a kubelet's Warning event
for a pod's simulation annotation means the run measured something else than the spec."""

from __future__ import annotations

import logging

import pytest

from bench.experiments import overrequest, worlds
from bench.experiments.worlds import SimClock
from sim.kubernetes.kubelet import DURATION, INVALID_ANNOTATION
from sim.spec import parse_spec
from tests.sim.kubernetes.helpers import pod
from tests.sim.kubernetes.running import H100, SPEC, api

QUIET = parse_spec({"nodePools": [{"name": "h100", "count": 1, "topology": "dgx-h100"}]})


@pytest.mark.django_db(transaction=True)
def test_the_kubernetes_world_counts_warning_events_by_reason() -> None:
    world = worlds.KubernetesWorld(SPEC, SimClock(overrequest.START))
    try:
        world.cluster.kube.add_namespace("ml-team")
        core = api(world.cluster)
        for name in ("odd-1", "odd-2"):
            annotations = {DURATION: "soon"}
            body = pod(name, nodeName=H100, metadata={"annotations": annotations})
            core.create_namespaced_pod("ml-team", body)
        world.step()
        assert world.warning_events() == {INVALID_ANNOTATION: 2}
    finally:
        world.close()


@pytest.mark.django_db(transaction=True)
def test_the_database_world_has_no_events() -> None:
    world = worlds.world("database", QUIET, SimClock(overrequest.START))
    world.step()
    assert world.warning_events() == {}


@pytest.mark.django_db(transaction=True)
def test_a_refused_annotation_is_logged_as_an_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(
        worlds.KubernetesWorld, "warning_events", lambda self: {INVALID_ANNOTATION: 3}
    )
    with caplog.at_level(logging.ERROR, logger=overrequest.__name__):
        result = overrequest.simulate(
            QUIET, "request-only", hours=0.1, warmup_hours=0.0, side="kubernetes"
        )
    assert result.as_json()["warning_events"] == {INVALID_ANNOTATION: 3}
    assert "3 pods' simulation annotations were refused" in caplog.text
