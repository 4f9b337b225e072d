"""Small builders for queue tests: cluster queues from a compact table, workloads by GPU count."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from scheduling.core.queueing.admission import QueuedWorkload
from scheduling.core.queueing.config import (
    BorrowWithinCohortPolicy,
    ClusterQueue,
    FlavorQuotas,
    FungibilityPolicy,
    Preemption,
    QueueingStrategy,
    ReclaimWithinCohort,
    ResourceFlavor,
    ResourceGroup,
    ResourceQuota,
    WithinClusterQueue,
)
from scheduling.core.queueing.preemption import AdmittedWorkload
from scheduling.core.queueing.resources import GPU, Demand
from scheduling.core.types import ServiceClass

G = 1000  # one GPU in canonical milli-GPU

FLAVORS = {
    "h100": ResourceFlavor("h100", MappingProxyType({"nvidia.com/gpu.product": "H100"})),
    "a100": ResourceFlavor("a100", MappingProxyType({"nvidia.com/gpu.product": "A100"})),
}


def cq(
    name: str,
    gpus: float | dict[str, float] = 0,
    *,
    cohort: str = "",
    borrowing: float | None = None,
    lending: float | None = None,
    strategy: QueueingStrategy = QueueingStrategy.BEST_EFFORT_FIFO,
    within: WithinClusterQueue = WithinClusterQueue.NEVER,
    reclaim: ReclaimWithinCohort = ReclaimWithinCohort.NEVER,
    borrow_within: BorrowWithinCohortPolicy = BorrowWithinCohortPolicy.NEVER,
    threshold: int | None = None,
    weight: float = 1.0,
    when_can_borrow: FungibilityPolicy = FungibilityPolicy.MAY_STOP_SEARCH,
    **more: Any,
) -> ClusterQueue:
    """A cluster queue with GPU quota only, in flavor h100 (or per flavor, in the given order)."""
    per_flavor = gpus if isinstance(gpus, dict) else {"h100": gpus}
    flavors = tuple(
        FlavorQuotas(
            flavor,
            MappingProxyType(
                {
                    GPU: ResourceQuota(
                        round(n * G),
                        None if borrowing is None else round(borrowing * G),
                        None if lending is None else round(lending * G),
                    )
                }
            ),
        )
        for flavor, n in per_flavor.items()
    )
    return ClusterQueue(
        name,
        cohort,
        (ResourceGroup((GPU,), flavors),),
        strategy,
        Preemption(within, reclaim, borrow_within, threshold),
        weight,
        when_can_borrow=when_can_borrow,
        **more,
    )


def wl(
    key: str,
    queue: str,
    gpus: float,
    *,
    priority: int = 0,
    created: float = 0.0,
    service_class: ServiceClass = ServiceClass.BATCH,
    models: frozenset[str] = frozenset(),
    local_queue: str = "",
) -> QueuedWorkload:
    return QueuedWorkload(
        key,
        queue,
        local_queue or f"ns/{queue}",
        priority,
        service_class,
        created,
        Demand(gpu_milli=round(gpus * G)),
        gpu_models=models,
    )


def held(
    key: str,
    queue: str,
    gpus: float,
    *,
    priority: int = 0,
    admitted: float = 0.0,
    created: float = 0.0,
    flavor: str = "h100",
    service_class: ServiceClass = ServiceClass.BATCH,
    local_queue: str = "",
) -> AdmittedWorkload:
    return AdmittedWorkload(
        key,
        queue,
        priority,
        service_class,
        created,
        admitted,
        MappingProxyType({(flavor, GPU): round(gpus * G)}),
        local_queue or f"ns/{queue}",
    )
