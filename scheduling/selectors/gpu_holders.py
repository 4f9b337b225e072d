"""What pods really hold, against what gpusched recorded. dcgm-exporter labels each GPU with the
pod holding it (`pod`, `namespace`: reference/wire-formats.md §1, read by telemetry.dcgm.pod_of);
gpusched recorded the GPU ids it chose. Where the classic device plugin gave a pod other GPUs
(it picks its own, lowest free first), the two differ: that is a mismatch, counted by the ingester
(`gpusched_gpu_assignment_mismatches_total`), shown on the Node page, and corrected by taking the
observed GPUs as the truth (scheduling.services.observed.assignments_reconcile) so that later
placements plan on what is really free.

Compared: whole GPUs of pods with a bound allocation, on the nodes the observation covers, for
pods the exporter labels (a pod the exporter does not name is unknown, not a mismatch). The
observed holders come from telemetry as plain data (telemetry.holders.observed_from_samples,
telemetry.selectors.observed_on_node). A pod is named as the node names it: a mirrored Kubernetes
pod by its namespace and name, a pod of the database side by its tenant's namespace and its name.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from scheduling.core.types import MILLI_PER_GPU
from scheduling.events import GpusObserved
from scheduling.models import Allocation, Event, GpuAssignment, Pod

PodName = tuple[str, str, str]  # (node, namespace, pod)


@dataclass(frozen=True)
class Mismatch:
    node: str
    namespace: str
    pod: str
    pod_uid: str
    recorded: tuple[int, ...]
    observed: tuple[int, ...]

    def describe(self) -> str:
        return (
            f"{self.namespace}/{self.pod}: recorded on GPUs {_ids(self.recorded)}, "
            f"holds {_ids(self.observed)}"
        )


def mismatches(observed: Mapping[PodName, tuple[int, ...]]) -> list[Mismatch]:
    """The pods the exporter labels whose recorded whole GPUs differ from the labelled ones."""
    nodes = {node for node, _, _ in observed}
    if not nodes:
        return []
    rows = GpuAssignment.objects.filter(
        active=True,
        mig_slot__isnull=True,
        milli=MILLI_PER_GPU,
        allocation__state=Allocation.State.BOUND,
        allocation__node__name__in=nodes,
    ).values_list(
        "allocation__node__name",
        "gpu__index",
        "allocation__pod__uid",
        "allocation__pod__name",
        "allocation__pod__workload__tenant__namespace",
        "allocation__pod__kube__namespace",
        "allocation__pod__kube__name",
    )
    recorded: dict[tuple[str, str, str, str], set[int]] = defaultdict(set)
    for node, index, uid, name, tenant_ns, kube_ns, kube_name in rows:
        namespace, pod = (kube_ns, kube_name) if kube_name else (tenant_ns, name)
        recorded[(node, namespace, pod, str(uid))].add(index)
    found = []
    for (node, namespace, pod, pod_uid), gpus in sorted(recorded.items()):
        seen = observed.get((node, namespace, pod))
        if seen is not None and seen != tuple(sorted(gpus)):
            found.append(Mismatch(node, namespace, pod, pod_uid, tuple(sorted(gpus)), seen))
    return found


def _ids(gpus: tuple[int, ...]) -> str:
    return ",".join(map(str, gpus)) or "none"


@dataclass(frozen=True)
class Correction:
    pod: str
    recorded: tuple[int, ...]
    observed: tuple[int, ...]
    source: str
    at: datetime


def node_corrections(node: str, *, since: datetime, limit: int = 5) -> list[Correction]:
    """The newest GPU id corrections on a node (its GpusObserved events)."""
    rows = list(
        Event.objects.filter(type=GpusObserved.TYPE, payload__node=node, created_at__gte=since)
        .order_by("-id")
        .values_list("payload", "created_at")[:limit]
    )
    uids = [payload.get("pod_uid") for payload, _ in rows]
    names = {
        str(uid): name for uid, name in Pod.objects.filter(uid__in=uids).values_list("uid", "name")
    }
    return [
        Correction(
            pod=names.get(str(payload.get("pod_uid")), str(payload.get("pod_uid"))),
            recorded=tuple(payload.get("recorded") or ()),
            observed=tuple(payload.get("observed") or ()),
            source=str(payload.get("source") or ""),
            at=at,
        )
        for payload, at in rows
    ]
