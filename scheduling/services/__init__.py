"""Writes. Every change to cluster state goes through here, in one transaction with its outbox
events (scheduling.events). One module per concern:

    tenants, nodes      what the cluster and the admins register
    workloads           submit, admit without queues, cancel, why they wait
    queues              Kueue-shaped queue configuration; admission (quota reserved)
    queue_sources       queues mirrored whole from a cluster (replace-style), the source's state
    fair_sharing        admission fair sharing: LocalQueue usage history, entry penalties
    evictions           admitted workloads losing their quota and pods, back to their queues
    binding             placements committed in batched transactions; a bind refused, undone
    decisions           why a pod went where it went, or why it waits
    lifecycle           pods run by the cluster, started and finished
    allocations         counters, releases, lent shares, expired reservations
    observed            allocations moved onto the GPUs pods really hold (DCGM's labels)
    leases              leader election

Callers import the package (`from scheduling import services`) and use the names below."""

from scheduling.services.allocations import allocations_release, reservations_expire
from scheduling.services.binding import CommitResult, placements_commit, pod_requeue
from scheduling.services.decisions import decisions_prune, explanation, pods_unschedulable
from scheduling.services.errors import FieldErrors, ServiceError
from scheduling.services.estimates import (
    WorkloadEstimate,
    reservations_released,
    workload_estimates_record,
)
from scheduling.services.evictions import workloads_evict
from scheduling.services.fair_sharing import local_queue_usage_sample
from scheduling.services.leases import lease_acquire, lease_release
from scheduling.services.lifecycle import (
    pods_cluster_managed,
    pods_finish,
    pods_start,
    pods_terminated,
    pods_vacate,
)
from scheduling.services.node_actions import node_action_answered, node_action_request
from scheduling.services.nodes import (
    node_register,
    node_set_cordoned,
    nodes_quarantine,
    nodes_register,
)
from scheduling.services.observed import (
    ObservedResult,
    ReconcileResult,
    assignments_reconcile,
    gpus_observe,
)
from scheduling.services.queue_sources import (
    QueuesReplaced,
    queue_source_record,
    queues_replace,
)
from scheduling.services.queues import (
    WorkloadAdmission,
    cluster_queue_consolidation_set,
    cluster_queue_fields,
    cluster_queue_limits_set,
    cluster_queue_quota_set,
    queue_admit,
    queues_apply,
    resource_groups_json,
    toleration_json,
)
from scheduling.services.tenants import tenant_create
from scheduling.services.workloads import (
    PodSetSpec,
    WorkloadSpec,
    priority_class_named,
    workload_cancel,
    workload_extend,
    workload_set_active,
    workload_submit,
    workloads_admit,
    workloads_submit,
    workloads_submit_pods,
    workloads_waiting,
)

__all__ = [
    "CommitResult",
    "FieldErrors",
    "ObservedResult",
    "PodSetSpec",
    "QueuesReplaced",
    "ReconcileResult",
    "ServiceError",
    "WorkloadAdmission",
    "WorkloadSpec",
    "allocations_release",
    "assignments_reconcile",
    "cluster_queue_fields",
    "cluster_queue_limits_set",
    "cluster_queue_consolidation_set",
    "cluster_queue_quota_set",
    "decisions_prune",
    "explanation",
    "gpus_observe",
    "lease_acquire",
    "lease_release",
    "local_queue_usage_sample",
    "node_register",
    "nodes_register",
    "node_set_cordoned",
    "node_action_answered",
    "node_action_request",
    "nodes_quarantine",
    "placements_commit",
    "pod_requeue",
    "priority_class_named",
    "pods_cluster_managed",
    "pods_finish",
    "pods_start",
    "pods_terminated",
    "pods_vacate",
    "pods_unschedulable",
    "queue_admit",
    "queue_source_record",
    "queues_apply",
    "queues_replace",
    "reservations_expire",
    "resource_groups_json",
    "tenant_create",
    "toleration_json",
    "workload_cancel",
    "workload_extend",
    "workload_set_active",
    "workload_submit",
    "workloads_admit",
    "workloads_evict",
    "workloads_submit",
    "workloads_submit_pods",
    "workloads_waiting",
    "reservations_released",
    "WorkloadEstimate",
    "workload_estimates_record",
]
