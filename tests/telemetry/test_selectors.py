"""Telemetry selectors: the scheduler's GPU view with ages, node freshness, usage series."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import override_settings

from telemetry import selectors, services
from telemetry.dcgm import GpuSample
from tests.telemetry.factories import T0, sample

# The upserts and rollups are hand-written SQL (ON CONFLICT, window functions) that must behave
# the same on PostgreSQL: the module runs again in the PostgreSQL pass.
pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def ingest(*gpus: GpuSample, at: datetime = T0) -> None:
    services.samples_ingest(gpus=list(gpus), observed_at=at, source="s")


@override_settings(TELEMETRY_FRESHNESS_SECONDS=30)
def test_gpu_loads_give_values_age_and_staleness_per_node_and_index() -> None:
    ingest(sample("n1", 0, busy=0.8, fb_used=100, pod="p", fb_free_mib=900), at=T0)
    ingest(sample("n2", 5, busy=None, fb_used=None, gpu_util=0.4), at=T0 + timedelta(seconds=20))

    loads = selectors.gpu_loads(now=T0 + timedelta(seconds=40))

    assert set(loads) == {("n1", 0), ("n2", 5)}
    n1 = loads[("n1", 0)]
    assert (n1.busy, n1.fb_used_mib, n1.fb_free_mib) == (0.8, 100, 900)
    assert n1.age_seconds == 40 and n1.stale
    assert n1.uuid == "GPU-n1-0"
    n2 = loads[("n2", 5)]
    assert n2.busy == 0.4  # GPU_UTIL/100 where the PROF field is absent
    assert n2.age_seconds == 20 and not n2.stale

    assert set(selectors.gpu_loads(now=T0, nodes=["n2"])) == {("n2", 5)}
    fresh = selectors.gpu_loads(now=T0 + timedelta(seconds=40), freshness=timedelta(minutes=5))
    assert not fresh[("n1", 0)].stale


def test_mig_instances_fold_into_their_gpu() -> None:
    ingest(
        sample("n1", 3, mig="9", profile="1g.10gb", busy=0.5, fb_used=5000, pod="a"),
        sample("n1", 3, mig="10", profile="1g.10gb", busy=0.25, fb_used=3000),
    )
    load = selectors.gpu_loads(now=T0)[("n1", 3)]
    assert load.busy == pytest.approx(0.375)
    assert load.fb_used_mib == 8000 and load.fb_free_mib is None
    assert [(m.instance, m.profile, m.busy) for m in load.mig] == [
        ("10", "1g.10gb", 0.25),
        ("9", "1g.10gb", 0.5),
    ]


@override_settings(TELEMETRY_FRESHNESS_SECONDS=30)
def test_node_freshness_is_fresh_stale_or_missing() -> None:
    ingest(sample("old"), at=T0)
    ingest(sample("new"), sample("new", 1), at=T0 + timedelta(seconds=50))
    states = selectors.node_freshness(now=T0 + timedelta(seconds=60), nodes=["old", "never"])
    assert {n: s.state for n, s in states.items()} == {
        "old": "stale",
        "new": "fresh",
        "never": "missing",
    }
    assert states["old"].age_seconds == 60 and states["new"].gpus == 2
    assert states["never"].last_sample_at is None


def pod_minutes(minute: int, used: dict[tuple[str, str], float]) -> None:
    """One reading per pod (a 1-GPU pod each) in minute `minute`, rolled up."""
    at = T0 + timedelta(minutes=minute, seconds=10)
    gpus = [
        sample(f"node-{pod}", 0, busy=busy, fb_used=busy * 1000, pod=pod, namespace=ns)
        for (ns, pod), busy in used.items()
    ]
    ingest(*gpus, at=at)
    services.telemetry_rollup(now=at + timedelta(minutes=1))


def test_p95_used_per_pod_namespace_and_tenant() -> None:
    for minute in range(20):
        pod_minutes(
            minute,
            {
                ("team-a", "train"): minute / 20,  # 0.00 .. 0.95
                ("team-a", "infer"): 0.1,
                ("team-b", "idle"): 0.0,
            },
        )
    now = T0 + timedelta(minutes=21)
    window = timedelta(hours=1)

    pods = selectors.pod_used_p95(window=window, now=now)
    assert pods[("team-a", "train")] == pytest.approx(0.90)  # nearest rank over 20 minutes
    assert pods[("team-a", "infer")] == pytest.approx(0.1)
    assert selectors.pod_used_p95(window=window, now=now, namespace="team-b") == {
        ("team-b", "idle"): 0.0
    }
    namespaces = selectors.namespace_used_p95(window=window, now=now)
    assert namespaces["team-a"] == pytest.approx(1.0)  # 0.90 + 0.1
    assert namespaces["team-b"] == 0.0
    tenants = selectors.tenant_used_p95(
        window=window, now=now, tenants={"team-a": "acme", "team-b": "acme"}
    )
    assert tenants == {"acme": pytest.approx(1.0)}
    # A short window sees only the last minutes.
    recent = selectors.pod_used_p95(window=timedelta(minutes=3), now=now)
    assert recent[("team-a", "train")] == pytest.approx(0.95)


def test_source_statuses() -> None:
    services.source_status_record(name="scrape", now=T0, gpus=1)
    assert [s.name for s in selectors.source_statuses()] == ["scrape"]


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], None), ([3.0], 3.0), ([1.0, 2.0], 2.0), ([float(i) for i in range(1, 101)], 95.0)],
)
def test_nearest_rank_p95(values: list[float], expected: float | None) -> None:
    assert selectors.p95(values) == expected
