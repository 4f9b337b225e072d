"""Queues mirrored whole from a source (services.queues_replace): what the source has is applied,
what it has not is removed, by Kueue's deletion rules; and the source's state
(services.queue_source_record)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from django.utils import timezone

from scheduling import events, services
from scheduling.core.queueing.config import QueueConfig
from scheduling.core.queueing.kueue_objects import parse_documents
from scheduling.models import (
    AdmissionFairSharingSettings,
    ClusterQueue,
    Cohort,
    Event,
    LocalQueue,
    PriorityClass,
    QueueSource,
    ResourceFlavor,
    Workload,
)
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

QUEUES = """
kind: ResourceFlavor
metadata: {name: h100}
---
kind: ResourceFlavor
metadata: {name: a100}
---
kind: Cohort
metadata: {name: org}
---
kind: ClusterQueue
metadata: {name: vision}
spec:
  cohortName: org
  stopPolicy: None
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: a100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
kind: ClusterQueue
metadata: {name: speech}
spec:
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 8}]
---
kind: LocalQueue
metadata: {name: default, namespace: team-a}
spec: {clusterQueue: vision}
---
kind: LocalQueue
metadata: {name: default, namespace: team-b}
spec: {clusterQueue: speech}
---
kind: WorkloadPriorityClass
metadata: {name: urgent}
value: 100
---
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
admissionFairSharing: {usageHalfLifeTime: 1h}
"""


def config(text: str = QUEUES, *, without: tuple[str, ...] = ()) -> QueueConfig:
    """QUEUES without the documents naming any of `without` ("ClusterQueue vision", ...)."""
    docs = [
        doc
        for doc in yaml.safe_load_all(text)
        if f"{doc['kind']} {(doc.get('metadata') or {}).get('name', '')}" not in without
    ]
    return parse_documents(docs)


def test_what_the_source_no_longer_has_is_removed() -> None:
    services.queues_replace(config=config(), fair_sharing=True)
    assert ClusterQueue.objects.count() == 2 and LocalQueue.objects.count() == 2
    replaced = services.queues_replace(
        config=config(
            without=(
                "ClusterQueue speech",
                "LocalQueue default",  # both LocalQueues
                "ResourceFlavor h100",
                "Cohort org",
                "WorkloadPriorityClass urgent",
                "Configuration ",
            )
        ),
        fair_sharing=True,
    )
    assert sorted(replaced.removed) == [
        "ClusterQueue speech",
        "Cohort org",
        "LocalQueue team-a/default",
        "LocalQueue team-b/default",
        "ResourceFlavor h100",
        "WorkloadPriorityClass urgent",
    ]
    assert list(ClusterQueue.objects.values_list("name", flat=True)) == ["vision"]
    assert list(ResourceFlavor.objects.values_list("name", flat=True)) == ["a100"]
    assert not (LocalQueue.objects.exists() or Cohort.objects.exists())
    assert not (PriorityClass.objects.exists() or AdmissionFairSharingSettings.objects.exists())
    published = events.read_after(0)
    assert [p.removed for _, p in published if isinstance(p, events.QueuesChanged)][-1]


def test_fair_sharing_settings_stay_unless_the_source_holds_them() -> None:
    services.queues_replace(config=config(), fair_sharing=True)
    services.queues_replace(config=config(without=("Configuration ",)), fair_sharing=False)
    assert AdmissionFairSharingSettings.objects.get().usage_half_life_s == 3600.0


def test_a_removed_cluster_queue_with_admitted_work_is_held_until_it_is_gone() -> None:
    services.queues_replace(config=config(), fair_sharing=False)
    tenant = factories.tenant("team-a")
    workload = factories.workload(tenant, "train", gpus=2)
    held = ClusterQueue.objects.get(name="vision")
    Workload.objects.filter(pk=workload.pk).update(state=Workload.State.RUNNING, cluster_queue=held)
    gone = ("ClusterQueue vision", "ResourceFlavor a100", "LocalQueue default")
    replaced = services.queues_replace(config=config(without=gone), fair_sharing=False)
    assert replaced.terminating == ["vision"]
    held.refresh_from_db()
    assert held.stop_policy == "Hold"  # admits nothing more, as Kueue's terminating queue
    assert ResourceFlavor.objects.filter(name="a100").exists()  # it still names it

    # Back in the source: as the source says again.
    services.queues_replace(config=config(), fair_sharing=False)
    held.refresh_from_db()
    assert held.stop_policy == "None"

    Workload.objects.filter(pk=workload.pk).update(state=Workload.State.FINISHED)
    replaced = services.queues_replace(config=config(without=gone), fair_sharing=False)
    assert replaced.terminating == []
    assert not ClusterQueue.objects.filter(name="vision").exists()
    assert not ResourceFlavor.objects.filter(name="a100").exists()
    assert Workload.objects.get(pk=workload.pk).cluster_queue is None


def test_an_inconsistent_source_changes_nothing() -> None:
    services.queues_replace(config=config(), fair_sharing=False)
    with pytest.raises(services.ServiceError, match="ClusterQueue 'speech' does not exist"):
        services.queues_replace(config=config(without=("ClusterQueue speech",)), fair_sharing=False)
    assert ClusterQueue.objects.count() == 2 and LocalQueue.objects.count() == 2


def test_the_source_state_says_since_when_it_is_refused_and_is_published_on_change() -> None:
    now = timezone.now()
    kind = QueueSource.Kind.CLUSTER
    assert services.queue_source_record(kind=kind, now=now, applied=True, notes=["left out"])
    assert not services.queue_source_record(kind=kind, now=now + timedelta(seconds=5))
    assert services.queue_source_record(kind=kind, now=now + timedelta(seconds=10), error="bad")
    assert services.queue_source_record(kind=kind, now=now + timedelta(seconds=20), error="worse")
    row = QueueSource.objects.get()
    assert (row.error, row.error_since, row.applied_at) == (
        "worse",
        now + timedelta(seconds=10),
        now,
    )
    assert row.notes == ["left out"]  # still about the last good queues
    services.queue_source_record(kind=kind, now=now + timedelta(seconds=30), applied=True)
    row.refresh_from_db()
    assert (row.error, row.error_since, row.notes) == ("", None, [])
    kinds = [
        (p.kind, p.error)
        for _, p in events.read_after(0)
        if isinstance(p, events.QueueSourceChanged)
    ]
    assert kinds == [("cluster", ""), ("cluster", "bad"), ("cluster", "worse"), ("cluster", "")]
    assert Event.objects.filter(type="queues.source").count() == 4
