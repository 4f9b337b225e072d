"""Every field of Kueue's v1beta2 queue objects and what gpusched does with it: honoured, or
refused with the reason (never accepted and ignored). The reader (kueue_objects) takes its refusal
messages from here, and docs/api.md's compatibility table is `markdown_table()`, so the two cannot
drift apart. Field names are Kueue's (kubernetes-sigs/kueue apis/kueue/v1beta2/*_types.go,
apis/config/v1beta2/configuration_types.go).
"""

from __future__ import annotations

from dataclasses import dataclass

HONOURED = "honoured"
REFUSED = "refused"
PARTLY = "honoured in part"

ADMISSION_CHECKS_REASON = (
    "admission checks are answered by external controllers (ProvisioningRequest, MultiKueue, "
    "custom ones) that gpusched does not run; accepting them unacted would admit work the admin "
    "meant to hold until the check passes"
)


@dataclass(frozen=True)
class Feature:
    kind: str
    field: str
    status: str
    why: str


FEATURES: tuple[Feature, ...] = (
    # --- ResourceFlavor
    Feature(
        "ResourceFlavor",
        "spec.nodeLabels",
        HONOURED,
        "flavors are matched against the pods' node selector and GPU models; admitted pods get "
        "the labels as node selector",
    ),
    Feature(
        "ResourceFlavor",
        "spec.nodeTaints",
        HONOURED,
        "a flavor is assigned only when the pods (or the flavor's tolerations) tolerate its "
        "NoSchedule and NoExecute taints, as in Kueue",
    ),
    Feature("ResourceFlavor", "spec.tolerations", HONOURED, "added to the admitted pods"),
    Feature(
        "ResourceFlavor",
        "spec.topologyName",
        HONOURED,
        "pod sets admitted with the flavor are placed by the Topology's levels as Kueue's TAS "
        "places them (required, preferred, unconstrained, slices; as tight as BestFit, its ties "
        "broken by what the racks and blocks keep whole), and inside each node by the GPUs' own "
        "topology",
    ),
    # --- ClusterQueue
    Feature(
        "ClusterQueue",
        "spec.resourceGroups",
        HONOURED,
        "any resource name (cpu, memory, nvidia.com/gpu, MIG, pods, extended resources such as "
        "example.com/credits), in Kubernetes quantities",
    ),
    Feature(
        "ClusterQueue",
        "spec.resourceGroups[].flavors[].resources[].borrowingLimit, lendingLimit",
        HONOURED,
        "as Kueue's quota tree: limits on what the queue borrows from and lends to its cohort",
    ),
    Feature(
        "ClusterQueue",
        "spec.cohortName (v1beta1: spec.cohort)",
        HONOURED,
        "the queue's cohort; a name without a Cohort object is a root cohort without quota",
    ),
    Feature("ClusterQueue", "spec.queueingStrategy", HONOURED, "StrictFIFO and BestEffortFIFO"),
    Feature(
        "ClusterQueue",
        "spec.namespaceSelector",
        PARTLY,
        "{} and selectors on kubernetes.io/metadata.name (matchLabels, In, NotIn, Exists) are "
        "honoured; other namespace labels are refused (gpusched does not know namespace labels "
        "of the database side). Absent means every namespace (Kueue: none)",
    ),
    Feature(
        "ClusterQueue",
        "spec.flavorFungibility.whenCanBorrow",
        HONOURED,
        "MayStopSearch (default) takes the first flavor that fits by borrowing; TryNextFlavor "
        "looks for a later flavor that fits without borrowing",
    ),
    Feature(
        "ClusterQueue",
        "spec.flavorFungibility.whenCanPreempt",
        PARTLY,
        "TryNextFlavor (default) is honoured; MayStopSearch is refused: gpusched looks for "
        "victims only after every flavor was tried for free quota",
    ),
    Feature(
        "ClusterQueue",
        "spec.flavorFungibility.preference",
        REFUSED,
        "gpusched always prefers free quota, then borrowing, then preemption",
    ),
    Feature(
        "ClusterQueue",
        "spec.preemption (withinClusterQueue, reclaimWithinCohort, borrowWithinCohort)",
        HONOURED,
        "Kueue's classic preemption, minimal victim sets; reclaimWithinCohort: Never with "
        "borrowWithinCohort is refused as Kueue refuses it",
    ),
    Feature(
        "ClusterQueue",
        "spec.fairSharing.weight",
        HONOURED,
        "weighted dominant resource share across the cohort tree",
    ),
    Feature(
        "ClusterQueue",
        "spec.admissionScope.admissionMode",
        HONOURED,
        "UsageBasedAdmissionFairSharing orders the queue's workloads by their LocalQueue's "
        "decayed usage; NoAdmissionFairSharing is the default",
    ),
    Feature(
        "ClusterQueue",
        "spec.stopPolicy",
        HONOURED,
        "Hold admits nothing new; HoldAndDrain also evicts what the queue admitted "
        "(ClusterQueueStopped)",
    ),
    Feature("ClusterQueue", "spec.admissionChecksStrategy", REFUSED, ADMISSION_CHECKS_REASON),
    Feature("ClusterQueue", "spec.admissionChecks (v1beta1)", REFUSED, ADMISSION_CHECKS_REASON),
    Feature(
        "ClusterQueue",
        "spec.concurrentAdmissionPolicy",
        REFUSED,
        "gpusched admits a workload to one flavor and never migrates it; it does not run "
        "several variants of one workload",
    ),
    # --- Cohort
    Feature("Cohort", "spec.parentName", HONOURED, "cohort trees; a cycle is refused"),
    Feature(
        "Cohort",
        "spec.resourceGroups",
        HONOURED,
        "quota shared by the subtree; borrowingLimit and lendingLimit bound what the subtree "
        "takes from and gives to its parent (only with a parent, as in Kueue)",
    ),
    Feature(
        "Cohort", "spec.fairSharing.weight", HONOURED, "the cohort's weight at its parent's level"
    ),
    # --- LocalQueue
    Feature("LocalQueue", "spec.clusterQueue", HONOURED, "where the namespace's workloads go"),
    Feature(
        "LocalQueue",
        "spec.stopPolicy",
        HONOURED,
        "Hold admits nothing new from the queue; HoldAndDrain also evicts its admitted "
        "workloads (LocalQueueStopped)",
    ),
    Feature(
        "LocalQueue",
        "spec.fairSharing.weight",
        HONOURED,
        "divides the LocalQueue's decayed usage in admission fair sharing",
    ),
    # --- priority classes
    Feature(
        "WorkloadPriorityClass",
        "value, description",
        HONOURED,
        "named by the label kueue.x-k8s.io/priority-class (pods) or priorityClassRef / "
        "priorityClassName (REST); orders queues and decides preemption",
    ),
    Feature(
        "WorkloadPriorityClass",
        "preemptionPolicy, globalDefault",
        HONOURED,
        "gpusched extensions taken from PriorityClass (Kueue's CRD has no such fields)",
    ),
    Feature(
        "PriorityClass (scheduling.k8s.io/v1)",
        "value, description, preemptionPolicy, globalDefault",
        HONOURED,
        "a pod's priorityClassName; a WorkloadPriorityClass label takes precedence",
    ),
    # --- Workload
    Feature(
        "Workload",
        "spec.active",
        HONOURED,
        "false evicts an admitted workload (InactiveWorkload) and keeps it out of admission "
        "until true again (REST `active`)",
    ),
    Feature(
        "Workload", "spec.priorityClassRef", HONOURED, "REST `priorityClassRef` {group, kind, name}"
    ),
    # --- Configuration
    Feature(
        "Configuration",
        "admissionFairSharing (usageHalfLifeTime, usageSamplingInterval, resourceWeights)",
        HONOURED,
        "the LocalQueue usage decay and weights of admission fair sharing",
    ),
    Feature(
        "Configuration",
        "every other key",
        REFUSED,
        "settings of Kueue's own manager process (integrations, webhooks, waitForPodsReady, "
        "fairSharing preemption strategies, ...) that gpusched does not read",
    ),
    # --- other kinds
    Feature(
        "AdmissionCheck, ProvisioningRequestConfig, MultiKueueConfig, MultiKueueCluster",
        "(kind)",
        REFUSED,
        ADMISSION_CHECKS_REASON,
    ),
    Feature(
        "Topology",
        "spec.levels",
        HONOURED,
        "v1alpha1, v1beta1 and v1beta2; the levels' node labels make the domains pod sets are "
        "placed in (nvidia.com/gpu.clique may be one)",
    ),
    Feature(
        "status (every kind)",
        "status",
        HONOURED,
        "read as observed state and not applied, so `kubectl get -o yaml` output loads",
    ),
)

REFUSED_KINDS: dict[str, str] = {
    "AdmissionCheck": ADMISSION_CHECKS_REASON,
    "ProvisioningRequestConfig": ADMISSION_CHECKS_REASON,
    "MultiKueueConfig": ADMISSION_CHECKS_REASON,
    "MultiKueueCluster": ADMISSION_CHECKS_REASON,
    "Workload": "workloads are submitted through the REST API or as pods, not as queue objects",
}


def reason(kind: str, field_name: str) -> str:
    """Why gpusched refuses `field_name` of `kind` (the feature's entry)."""
    for feature in FEATURES:
        if feature.kind == kind and (
            feature.field == field_name or feature.field.startswith(field_name + " ")
        ):
            return feature.why
    raise KeyError(f"{kind}.{field_name} is not in the compatibility table")


def refusal(kind: str, field_name: str, path: str) -> str:
    return f"{path}: Kueue's {kind} {field_name} is not supported by gpusched: " + reason(
        kind, field_name
    )


def markdown_table() -> str:
    """docs/api.md's Kueue compatibility table."""
    rows = ["| Kueue kind | Field | gpusched | Why |", "| --- | --- | --- | --- |"]
    for f in FEATURES:
        rows.append(f"| {f.kind} | `{f.field}` | {f.status} | {f.why} |")
    return "\n".join(rows)
