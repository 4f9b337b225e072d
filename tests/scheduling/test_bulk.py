"""Writes in bulk keep every guarantee of writes one by one: the rows and ids of a bulk_create, the
constraints' refusals as IntegrityError, and checked increments that judge each row as it is now.
On PostgreSQL (`-m postgres`) these go through COPY and UPDATE ... FROM VALUES."""

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling import events
from scheduling.bulk import insert_rows, update_rows
from scheduling.models import Allocation, Event, GpuAssignment, Node, PlacementDecision, Pod
from scheduling.services.allocations import add_counts
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def _allocations(node: Node, count: int) -> list[Allocation]:
    tenant = factories.tenant()
    pods = [factories.workload(tenant, f"w{k}").pods.get() for k in range(count)]
    return insert_rows(
        [
            Allocation(pod=pod, node=node, state=Allocation.State.BOUND, numa_cpu_milli=[k, 0])
            for k, pod in enumerate(pods)
        ]
    )


def test_inserted_rows_read_back_as_written_with_their_ids() -> None:
    (node,) = factories.nodes(1)
    allocations = _allocations(node, 3)
    assert [a.pk for a in allocations] == sorted(a.pk for a in allocations)
    for k, allocation in enumerate(allocations):
        stored = Allocation.objects.get(pk=allocation.pk)
        assert (stored.pod_id, stored.node_id, stored.numa_cpu_milli) == (
            allocation.pod_id,
            node.pk,
            [k, 0],
        )
        assert stored.created_at is not None  # auto_now_add, as bulk_create sets it
    records = insert_rows(
        [
            PlacementDecision(
                pod_id=a.pod_id, outcome="Success", summary="s", explanation={"k": [k]}
            )
            for k, a in enumerate(allocations)
        ]
    )
    assert [PlacementDecision.objects.get(pk=r.pk).explanation for r in records] == [
        {"k": [0]},
        {"k": [1]},
        {"k": [2]},
    ]


def test_a_unique_constraint_refuses_a_bulk_insert_whole() -> None:
    (node,) = factories.nodes(1)
    first, second = _allocations(node, 2)
    gpu = node.gpus.get(index=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        insert_rows(
            [
                GpuAssignment(allocation=first, gpu=gpu, milli=1000, exclusive=True),
                GpuAssignment(allocation=second, gpu=gpu, milli=1000, exclusive=True),
            ]
        )
    assert not GpuAssignment.objects.exists()


@pytest.mark.django_db(transaction=True)  # committed: the ids are given at COMMIT on PostgreSQL
def test_events_published_together_keep_their_order() -> None:
    with transaction.atomic():
        events.publish(*(events.NodeQuarantined(node=f"n{k}") for k in range(30)))
        events.publish(*(events.NodeQuarantined(node=f"n{k}") for k in range(30, 50)))
    stored = list(Event.objects.order_by("id").values_list("payload__node", flat=True))
    assert stored == [f"n{k}" for k in range(50)]


def test_updated_rows_read_back_as_written_and_keep_their_other_columns() -> None:
    """More rows than one statement takes (chunks), text that needs quoting, JSON, times, NULL."""
    owner = factories.tenant()
    factories.workload(owner, "w", pods=1200)
    pods = list(Pod.objects.order_by("id"))
    now = timezone.now()
    for k, pod in enumerate(pods):
        pod.attempts = k
        pod.last_reason = f'it\'s "{k}" – 0/{k} nodes'
        pod.pending_explanation = {"summary": pod.last_reason, "groups": [{"n": k}]}
        pod.next_attempt_at = None if k % 2 else now + timedelta(seconds=k)
    assert update_rows(pods[1:], ["attempts", "last_reason", "pending_explanation"]) == 1199
    assert update_rows(pods[1:], ["next_attempt_at"]) == 1199
    stored = {
        row[0]: row[1:]
        for row in Pod.objects.values_list(
            "id", "attempts", "last_reason", "pending_explanation", "next_attempt_at", "phase"
        )
    }
    assert stored[pods[0].pk][:3] == (0, "", {})  # not among the rows written
    for pod in pods[1:]:
        assert stored[pod.pk] == (
            pod.attempts,
            pod.last_reason,
            pod.pending_explanation,
            pod.next_attempt_at,
            "Pending",
        )


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    used=st.lists(st.integers(0, 4000), min_size=1, max_size=6),
    deltas=st.lists(st.integers(0, 4000), min_size=1, max_size=6),
)
def test_a_checked_batch_passes_only_when_every_row_stays_within_capacity(
    used: list[int], deltas: list[int]
) -> None:
    """Each row moves only if it stays within its capacity, and the batch says whether all did
    (the caller rolls back a refusal)."""
    Node.objects.all().delete()  # each example starts from nothing
    nodes = factories.nodes(len(used), "t4-2gpu")
    for node, amount in zip(nodes, used, strict=True):
        Node.objects.filter(pk=node.pk).update(cpu_milli=4000, cpu_used_milli=amount)
    before = {node.pk: amount for node, amount in zip(nodes, used, strict=True)}
    change = dict(zip(before, deltas, strict=False))
    fits = {pk: before[pk] + delta <= 4000 for pk, delta in change.items() if delta}
    assert add_counts(Node, "cpu_used_milli", change, capacity="cpu_milli") == all(fits.values())
    now = dict(Node.objects.values_list("pk", "cpu_used_milli"))
    assert now == {pk: before[pk] + (change[pk] if fits.get(pk) else 0) for pk in before}
