"""The database itself refuses over-commit, whoever writes (CHECK, partial UNIQUE constraints)."""

import pytest
from django.db import IntegrityError, transaction
from django.db.models import F

from scheduling.models import Allocation, Gpu, GpuAssignment, Node
from scheduling.services.allocations import add_counts
from tests.scheduling import factories

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]


def _allocation(node: Node) -> Allocation:
    pod = factories.workload(factories.tenant(), f"w{Allocation.objects.count()}").pods.get()
    return Allocation.objects.create(pod=pod, node=node, state=Allocation.State.BOUND)


def test_a_gpu_cannot_hold_more_than_1000_milli() -> None:
    (node,) = factories.nodes(1)
    gpu = node.gpus.get(index=0)
    Gpu.objects.filter(pk=gpu.pk).update(used_milli=F("used_milli") + 700)
    with pytest.raises(IntegrityError), transaction.atomic():
        Gpu.objects.filter(pk=gpu.pk).update(used_milli=F("used_milli") + 301)
    gpu.refresh_from_db()
    assert gpu.used_milli == 700


def test_a_node_cannot_give_more_cpu_than_it_has() -> None:
    """Raised only by the checked update, which judges the row as it is now."""
    (node,) = factories.nodes(1)
    assert not add_counts(
        Node, "cpu_used_milli", {node.pk: node.cpu_milli + 1}, capacity="cpu_milli"
    )
    assert Node.objects.get(pk=node.pk).cpu_used_milli == 0
    assert add_counts(Node, "cpu_used_milli", {node.pk: node.cpu_milli}, capacity="cpu_milli")
    assert not add_counts(Node, "cpu_used_milli", {node.pk: 1}, capacity="cpu_milli")


def test_a_node_may_report_less_capacity_than_it_holds() -> None:
    """Kubernetes lowers allocatable under running pods: recording it must never fail (the node is
    quarantined instead, scheduling.worker.cluster_state)."""
    (node,) = factories.nodes(1)
    Node.objects.filter(pk=node.pk).update(cpu_used_milli=F("cpu_milli"))
    Node.objects.filter(pk=node.pk).update(cpu_milli=1000)
    with pytest.raises(IntegrityError), transaction.atomic():
        Node.objects.filter(pk=node.pk).update(cpu_used_milli=-1)


def test_two_exclusive_holders_of_one_gpu_are_refused() -> None:
    (node,) = factories.nodes(1)
    gpu = node.gpus.get(index=3)
    GpuAssignment.objects.create(allocation=_allocation(node), gpu=gpu, milli=1000, exclusive=True)
    with pytest.raises(IntegrityError), transaction.atomic():
        GpuAssignment.objects.create(
            allocation=_allocation(node), gpu=gpu, milli=1000, exclusive=True
        )


def test_a_released_holder_does_not_block_the_next() -> None:
    (node,) = factories.nodes(1)
    gpu = node.gpus.get(index=3)
    first = GpuAssignment.objects.create(
        allocation=_allocation(node), gpu=gpu, milli=1000, exclusive=True
    )
    GpuAssignment.objects.filter(pk=first.pk).update(active=False)
    GpuAssignment.objects.create(allocation=_allocation(node), gpu=gpu, milli=1000, exclusive=True)


def test_a_pod_has_at_most_one_active_allocation() -> None:
    (node,) = factories.nodes(1)
    allocation = _allocation(node)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(pod=allocation.pod, node=node, state=Allocation.State.RESERVED)


def test_an_allocation_cannot_be_active_and_released() -> None:
    (node,) = factories.nodes(1)
    allocation = _allocation(node)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.filter(pk=allocation.pk).update(state=Allocation.State.RELEASED)
