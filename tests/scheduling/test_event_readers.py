"""Readers of the outbox get payload objects, and every reader says, for every event type, whether
it handles or ignores it (so a new type cannot fall through a reader unnoticed)."""

import pytest

from scheduling import events


def _readers() -> dict[str, tuple[frozenset, frozenset]]:
    """Every reader of the outbox: the types it handles and the types it ignores."""
    from dashboard.live import VIEWS
    from scheduling.worker.cache import ClusterCache

    readers = {
        "ClusterCache": (ClusterCache.HANDLES | ClusterCache.REBUILDS_ON, ClusterCache.IGNORES)
    }
    for name, view in VIEWS.items():
        readers[f"live view {name}"] = (view.HANDLES, view.ignores())
    return readers


@pytest.mark.parametrize("reader", sorted(_readers()))
def test_every_reader_handles_or_ignores_every_event_type(reader: str) -> None:
    handles, ignores = _readers()[reader]
    known = set(events.EVENT_TYPES.values())
    assert not (handles & ignores), f"{reader} both handles and ignores {handles & ignores}"
    assert known <= handles | ignores, f"{reader} says nothing of {known - handles - ignores}"


def test_every_payload_type_reads_back_as_itself() -> None:
    samples = {
        events.NodeChanged: events.NodeChanged(node="n", cordoned=True, gpus=8, labels={"a": "b"}),
        events.WorkloadChanged: events.WorkloadChanged(
            uid="u", tenant="t", name="w", queue="q", state="Pending"
        ),
        events.WorkloadEvicted: events.WorkloadEvicted(
            uid="u", tenant="t", name="w", queue="q", cluster_queue="cq", reason="r", pods=["p"]
        ),
        events.ReservationReleased: events.ReservationReleased(
            uid="u", tenant="t", name="w", nodes=["n"], reason="held for 6.1 h without starting"
        ),
        events.QueuesChanged: events.QueuesChanged(
            flavors=["a100"], cohorts=["org"], removed=["LocalQueue ns/gone"]
        ),
        events.QueueSourceChanged: events.QueueSourceChanged(
            kind="cluster", error="clusterqueues[0] (ClusterQueue a): ..."
        ),
        events.LocalQueueUsageSampled: events.LocalQueueUsageSampled(local_queues=["ns/q"]),
        events.PodBound: events.PodBound(
            uid="u",
            name="p",
            tenant="t",
            workload="w",
            node="n",
            gpus=[0, 1],
            milli_per_gpu=1000,
            mig_slots=[],
            scope="nvlink",
        ),
        events.PodUnschedulable: events.PodUnschedulable(
            uid="u", name="p", tenant="t", workload="w", reason="NoFit", attempts=2
        ),
        events.PodPhaseChanged: events.PodPhaseChanged(
            uid="u", name="p", tenant="t", workload="w", phase="Running"
        ),
        events.AllocationReleased: events.AllocationReleased(
            pod_uid="u", node="n", gpus=[3], reason="done"
        ),
        events.AllocationPromoted: events.AllocationPromoted(pod_uid="u", node="n", gpu=2),
        events.GpusObserved: events.GpusObserved(
            pod_uid="u", node="n", recorded=[0, 1], observed=[2, 3], source="dcgm"
        ),
        events.NodeQuarantined: events.NodeQuarantined(node="n", reason="holds more than it has"),
        events.AdminActed: events.AdminActed(
            actor="admin", action="node.drain", target="n", detail={"evicted": ["w"]}
        ),
    }
    assert set(samples) == set(events.EVENT_TYPES.values())
    for cls, payload in samples.items():
        doc = payload.as_json()
        assert events.read(doc["type"], doc) == payload, cls


def test_a_type_this_version_does_not_know_reads_as_unknown() -> None:
    unknown = events.read("pod.teleported", {"uid": "u"})
    assert isinstance(unknown, events.UnknownEvent)
    assert events.event_type(unknown) == "pod.teleported"
    # A known type missing a required field cannot be trusted either.
    assert isinstance(events.read("pod.bound", {"uid": "u"}), events.UnknownEvent)
