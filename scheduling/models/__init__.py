"""Cluster state and every allocation, durable in the database: the models by area (cluster,
queues, workloads, allocations, coordination), each module read with the constraints below.

Over-commit is impossible at the database level, whatever the number of scheduler replicas:
- each GPU carries `used_milli` under CHECK (0 <= used_milli <= 1000), incremented in the binding
  transaction, so a shared GPU can never hold more than one GPU's worth;
- a GPU held whole has an active `GpuAssignment` with `exclusive=True`, unique per GPU;
- a MIG slot has at most one active assignment;
- each node carries `cpu_used_milli` / `memory_used_mib`, and each of its NUMA nodes
  `cpu_used_milli` (`NodeNuma`), raised only by a checked update (`used + delta <= capacity`, the
  row locked by the UPDATE itself): a node may report less capacity than it holds (Kubernetes
  lowers allocatable under running pods), which must never stop its registration, but nothing
  more is ever placed on it until it is consistent (it is quarantined:
  scheduling.worker.cluster_state);
- a pod has at most one active allocation, and binding moves it from Pending only once;
- what a shared GPU lends to opportunistic pods out of its owners' idle capacity (reclaim,
  scheduling.core.reclaim) is counted apart, in `lent_milli` under CHECK (0 <= lent <= 1000):
  owners keep their `used_milli`, and a release that leaves more lent than owned moves lent pods
  onto the free capacity (services.allocations).

Allocation life cycle: reserved (counted, may expire: a gang still gathering) -> bound -> released.
"""

from scheduling.models.allocations import Allocation, GpuAssignment
from scheduling.models.cluster import Gpu, Node, NodeAction, NodeNuma, Tenant
from scheduling.models.coordination import Event, Lease
from scheduling.models.queues import (
    AdmissionFairSharingSettings,
    ClusterQueue,
    Cohort,
    LocalQueue,
    PriorityClass,
    QueueSource,
    ResourceFlavor,
    Topology,
)
from scheduling.models.workloads import PlacementDecision, Pod, PodConstraints, Workload

__all__ = [
    "AdmissionFairSharingSettings",
    "Allocation",
    "ClusterQueue",
    "Cohort",
    "Event",
    "Gpu",
    "GpuAssignment",
    "Lease",
    "LocalQueue",
    "Node",
    "NodeAction",
    "NodeNuma",
    "PlacementDecision",
    "Pod",
    "PodConstraints",
    "PriorityClass",
    "QueueSource",
    "ResourceFlavor",
    "Tenant",
    "Topology",
    "Workload",
]
