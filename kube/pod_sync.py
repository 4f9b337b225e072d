"""Pods into the database (the Kubernetes side's sync, kube.side): pods pending for us become
Pending workloads, one per pod or per pod group (kube.groups), admitted by the same queues as
everything else; pods bound by anyone are counted where they run (kube.adopt); finished, deleted
or evicted pods release what they hold once they are gone. A pod's ResourceClaims are read into
its ask (kube.claims); a pod whose claim does not exist yet waits, told why, and is looked at
again every sync until it does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from datetime import datetime
from typing import Any

from django.db.models import prefetch_related_objects

from kube import groups
from kube import services as kube_services
from kube.adopt import placement_on, single_strategy_ask
from kube.claims import ClaimBook, ClaimsPending
from kube.groups import GroupError, GroupKind, GroupRef
from kube.informer import Change, Informer, PeriodicList
from kube.jobs import INDEX_ANNOTATION, WANT_RUNNING, owner_job_uid
from kube.materialize import POD_UID_ANNOTATION
from kube.models import KubeJob, KubePod
from kube.teller import Teller
from kube.translate import ANNOTATION_GPU_IDS, PodInfo, pod_info, to_request
from scheduling import services
from scheduling.core.cycle_state import CycleState
from scheduling.core.scheduler import Decision
from scheduling.core.status import Status
from scheduling.core.types import NodeSpec
from scheduling.models import Allocation, Pod, Workload
from scheduling.worker.cache import ClusterCache
from scheduling.worker.cluster_state import pod_request

logger = logging.getLogger(__name__)


class PodMirror:
    def __init__(
        self,
        *,
        pods: Informer,
        scheduler_name: str,
        cache: ClusterCache,
        identity: str,
        teller: Teller,
        claims: ClaimBook,
        group_objects: Mapping[GroupKind, list[PeriodicList]],
        queues_admit: Callable[[], bool],
        node_spec: Callable[[str], NodeSpec | None],
        warn_once: Callable[..., None],
        binding: Callable[[], Set[str]] = frozenset,
    ) -> None:
        self.pods = pods
        self.scheduler_name = scheduler_name
        self.cache = cache
        self.identity = identity
        self.teller = teller
        self.claims = claims
        self.group_objects = group_objects
        self.queues_admit = queues_admit
        self.node_spec = node_spec
        self._warn_once = warn_once
        self.binding = binding  # the uids of the pods whose Bindings are not answered yet
        self._claims_pending: set[str] = set()  # pod keys waiting for a claim to exist
        self._held_back: dict[str, Change] = {}

    def pod_info(self, obj: Mapping[str, Any]) -> PodInfo:
        """The pod as gpusched reads it, its claims' GPUs in its ask (ClaimsPending while a claim
        does not exist yet)."""
        return self.claims.ask_of(pod_info(obj), obj)

    def sync(self, counts: dict[str, int], now: datetime, *, full: bool) -> None:
        changes = {**self._held_back, **self.pods.drain()}
        self._held_back = {}
        if self._claims_pending:  # looked at again until their claims exist
            current = self.pods.snapshot()
            for key in self._claims_pending - changes.keys():
                if key in current:
                    changes[key] = (current[key], False)
            self._claims_pending = set()
        if full:
            current = self.pods.snapshot()
            changes.update({key: (obj, False) for key, obj in current.items()})
            # Besides the pods that exist, what the informer saw go since the last sync is in
            # `changes` with its final state (Succeeded, say): a second, bare "gone" for it would
            # record a finished pod as failed, or an evicted one as cancelled.
            known = {(obj.get("metadata") or {}).get("uid") for obj, _ in changes.values()}
            stale = KubePod.objects.filter(pod__phase__in=Pod.ACTIVE_PHASES).exclude(uid__in=known)
            for gone in stale:
                doc = {"metadata": {"uid": gone.uid, "namespace": gone.namespace}}
                doc["metadata"]["name"] = gone.name
                changes[f"gone/{gone.uid}"] = (doc, True)
        # A pod whose Binding is not answered yet may be seen still unbound (the informer's
        # event predates it): read as it is, it would be a bind that never went out. Its change
        # waits for the answer; its deletion does not.
        binding = self.binding()
        if binding:
            for key in [k for k, (obj, deleted) in changes.items() if not deleted]:
                if _uid(changes[key][0]) in binding:
                    self._held_back[key] = changes.pop(key)
        if not changes:
            return
        # What the database holds of the pods mirrored already, as values: their Pod row's phase
        # and where its allocation is. Most changes agree with it (a Binding seen, a pass over
        # pods unchanged) and need no row read whole.
        recorded = {
            uid: (pod_id, phase)
            for uid, pod_id, phase in KubePod.objects.filter(
                uid__in=[_uid(obj) for obj, _ in changes.values()]
            ).values_list("uid", "pod_id", "pod__phase")
        }
        held_on = dict(
            Allocation.objects.filter(
                active=True, pod_id__in=[pod_id for pod_id, _ in recorded.values()]
            ).values_list("pod_id", "node__name")
        )
        infos = []
        for obj, deleted in changes.values():
            if _uid(obj) in recorded and (deleted or _placed_or_ended(obj) or not _claims(obj)):
                # Its ask is in the database already, and only where it runs, or that it
                # ended, matters now (most changes: a Binding's, a start, an end, a full pass;
                # a pod with claims is still read with them: one may have gone).
                infos.append((pod_info(obj, ask_read=False), deleted, obj))
                continue
            try:
                infos.append((self.pod_info(obj), deleted, obj))
            except ClaimsPending as exc:
                info = pod_info(obj)
                if deleted or not info.pending_for(self.scheduler_name):
                    infos.append((info, deleted, obj))
                    continue
                self._claims_pending.add(info.key)
                self.teller.tell(info, f"WaitingForResourceClaim: {exc}", now)
        acting = [
            info.uid
            for info, deleted, _ in infos
            if info.uid in recorded
            and _acts_on(
                info,
                deleted,
                recorded[info.uid][1],
                held_on.get(recorded[info.uid][0]),
                self.scheduler_name,
            )
        ]
        mirrored = {
            kp.uid: kp
            for kp in KubePod.objects.filter(uid__in=acting).select_related("pod").order_by("id")
        }
        # The workloads, tenants and constraints of the pods whose state changes, in a few reads.
        prefetch_related_objects(
            [
                kube_pod
                for info, deleted, _ in infos
                if (kube_pod := mirrored.get(info.uid)) and _acted_on(info, deleted, kube_pod.pod)
            ],
            "pod__workload__tenant",
            "pod__constraints",
        )
        bound_by_others: list[tuple[PodInfo, KubePod | None, Mapping[str, Any]]] = []
        started: list[tuple[Pod, datetime | None]] = []  # and when the kubelet started it
        singles: list[PodInfo] = []
        grouped: dict[str, GroupRef] = {}
        for info, deleted, obj in infos:
            kube_pod = mirrored.get(info.uid)
            if kube_pod is None and info.uid in recorded:  # mirrored, nothing to do about it
                if deleted or info.terminal:
                    self.teller.forget(info.uid)
                continue
            if deleted or info.terminal:
                if kube_pod is not None and kube_pod.pod.phase in Pod.ACTIVE_PHASES:
                    kube_services.pod_gone(
                        kube_pod=kube_pod,
                        succeeded=info.phase == "Succeeded",
                        now=now,
                        started_at=info.started_at,
                        finished_at=info.finished_at,
                    )
                    counts["pods_released"] = counts.get("pods_released", 0) + 1
                self.teller.forget(info.uid)
                continue
            if info.node_name:
                if kube_pod is None:
                    if info.ask is not None and not info.ask.empty:
                        bound_by_others.append((info, None, obj))
                    continue
                pod = kube_pod.pod
                if pod.phase in Pod.PLACED_PHASES and held_on.get(pod.pk) not in (
                    None,
                    info.node_name,
                ):
                    services.pod_requeue(pod=pod, reason="bound elsewhere", now=now)
                    counts["requeued"] = counts.get("requeued", 0) + 1
                if pod.phase == Pod.Phase.PENDING:
                    bound_by_others.append((info, kube_pod, obj))  # someone else bound our pod
                elif info.phase == "Running":
                    started.append((pod, info.started_at))
                continue
            if not info.pending_for(self.scheduler_name):
                continue
            if kube_pod is not None:
                if kube_pod.pod.phase in Pod.PLACED_PHASES:
                    # In the database but not in the cluster: a bind that never went out (a
                    # crash between commit and bind). Give it back and try again.
                    services.pod_requeue(pod=kube_pod.pod, reason="not bound", now=now)
                    counts["requeued"] = counts.get("requeued", 0) + 1
                continue
            if self._link_made(info) or self._link_job_pod(info, obj, now):
                continue
            if info.ask is None:
                self.teller.tell(info, f"gpusched cannot schedule this pod: {info.error}", now)
                continue
            ref = groups.group_of(obj)
            if ref is None:
                singles.append(info)
            else:
                grouped[ref.key] = ref
        mirrored_now = self._mirror_singles(singles, now)
        counts["pods_mirrored"] = counts.get("pods_mirrored", 0) + mirrored_now
        for ref in grouped.values():
            counts["pods_mirrored"] = counts.get("pods_mirrored", 0) + self._mirror_group(ref, now)
        if bound_by_others:
            started += self._adopt(bound_by_others, counts, now)
        if started:
            kube_services.pods_started(pods=started, now=now)

    def _link_made(self, info: PodInfo) -> bool:
        """A pod gpusched made for a submitted workload: link it to its Pod row."""
        uid = info.annotations.get(POD_UID_ANNOTATION)
        if not uid:
            return False
        pod = (
            Pod.objects.filter(uid=uid, phase=Pod.Phase.PENDING, kube__isnull=True)
            .select_related("workload__tenant")
            .first()
        )
        if pod is not None:
            kube_services.kube_pod_link(pod=pod, info=info)
        return True

    def _link_job_pod(self, info: PodInfo, obj: Mapping[str, Any], now: datetime) -> bool:
        """A pod of a Job run as a workload (kube.jobs): linked to one of its workload's free Pod
        rows, the one of its completion index when it has one. False: no such Job."""
        owner = owner_job_uid(obj)
        row = KubeJob.objects.filter(uid=owner).first() if owner else None
        if row is None:
            return False
        free = {
            pod.name: pod
            for pod in Pod.objects.filter(
                workload_id=row.workload_id, phase=Pod.Phase.PENDING, kube__isnull=True
            )
            .select_related("workload__tenant")
            .order_by("-id")
        }
        index = info.annotations.get(INDEX_ANNOTATION)
        pod = free.get(f"{row.name}-{index}") if index is not None else None
        pod = pod or next(reversed(free.values()), None)
        if pod is None or pod.workload.state not in WANT_RUNNING:
            self.teller.tell(info, f"WaitingForJob: Job {row} has no admitted place for it", now)
            return True
        kube_services.kube_pod_link(pod=pod, info=info)
        return True

    def _mirror_group(self, ref: GroupRef, now: datetime) -> int:
        """The group's pods pending for us and not mirrored yet join its workload, or become one
        once there are as many as its quorum; until then they wait, told why."""
        members: list[tuple[PodInfo, dict[str, Any]]] = []
        known: list[str] = []
        for obj in self.pods.snapshot().values():
            if groups.group_of(obj) != ref:
                continue
            try:
                info = self.pod_info(obj)
            except ClaimsPending:
                continue
            known.append(info.uid)
            if info.pending_for(self.scheduler_name) and info.ask is not None:
                members.append((info, obj))
        linked = set(KubePod.objects.filter(uid__in=known).values_list("uid", flat=True))
        fresh = [(info, obj) for info, obj in members if info.uid not in linked]
        if not fresh:
            return 0
        existing = (
            Workload.objects.filter(pods__kube__uid__in=linked, state__in=Workload.ACTIVE_STATES)
            .select_related("tenant")
            .first()
        )
        if existing is not None:
            kube_services.workload_join(workload=existing, members=[i for i, _ in fresh])
            return len(fresh)
        objects = {
            groups.object_ref(kind.name, obj).key: obj
            for kind, sources in self.group_objects.items()
            for obj in next((s.items for s in sources if s.served), {}).values()
        }
        try:
            needed = groups.quorum(ref, fresh[0][1], objects)
        except GroupError as exc:
            for info, _ in fresh:
                self.teller.tell(info, f"WaitingForGang: {exc}", now)
            return 0
        if needed is not None and len(fresh) < needed:
            for info, _ in fresh:
                self.teller.tell(
                    info,
                    f"WaitingForGang: {len(fresh)} of {needed} pods of group {ref.name} exist",
                    now,
                )
            return 0
        return len(fresh) if self._mirror([i for i, _ in fresh], ref.name, needed, now) else 0

    def _mirror_singles(self, singles: list[PodInfo], now: datetime) -> int:
        """Each pod a workload of its own, a burst of them in one go; a burst the database
        refuses (a WorkloadPriorityClass label naming no class) goes one by one, so that only
        the pods concerned are told why."""
        if not singles:
            return 0
        try:
            kube_services.workloads_mirror(
                groups=[kube_services.MirrorGroup(info.name, [info]) for info in singles],
                workload_classes=self.queues_admit(),
            )
            return len(singles)
        except services.ServiceError:
            return sum(self._mirror([info], info.name, None, now) for info in singles)

    def _mirror(
        self, members: list[PodInfo], name: str, min_count: int | None, now: datetime
    ) -> bool:
        """Mirror pods as one workload; what the database refuses (a WorkloadPriorityClass
        label naming no class) is told on the pods instead."""
        try:
            kube_services.workload_mirror(
                name=name,
                members=members,
                min_count=min_count,
                workload_classes=self.queues_admit(),
            )
        except services.ServiceError as exc:
            for info in members:
                self.teller.tell(info, f"gpusched cannot schedule this pod: {exc}", now)
            return False
        return True

    def _adopt(
        self,
        pending: list[tuple[PodInfo, KubePod | None, Mapping[str, Any]]],
        counts: dict[str, int],
        now: datetime,
    ) -> list[tuple[Pod, datetime | None]]:
        """Count pods bound by someone else where they run; those running, with their start."""
        cluster = self.cache.state()
        snapshot = cluster.snapshot
        placed: list[tuple[Pod, Decision]] = []
        running: dict[int, datetime | None] = {}
        for info, kube_pod, obj in pending:
            if kube_pod is not None:
                pod = kube_pod.pod
                request = pod_request(pod)
            else:
                assert info.ask is not None
                ask = single_strategy_ask(snapshot, info.node_name, info.ask)
                request = to_request(info.uid, info.name, info.namespace, info.priority or 0, ask)
            placement = placement_on(
                snapshot, info.node_name, request, self._held_annotations(info, obj)
            )
            if placement is None:
                self._warn_once(
                    f"adopt:{info.uid}",
                    "pod %s on %s is not counted: the node is unknown or full in our view",
                    info.key,
                    info.node_name,
                )
                continue
            if kube_pod is None:
                pod = kube_services.workload_mirror_admitted(
                    info=info, workload_classes=self.queues_admit()
                )
                request = pod_request(pod)
            snapshot.assume(request, placement)
            decision = Decision(
                request, Status.success(), [placement.node], CycleState(), placement=placement
            )
            placed.append((pod, decision))
            if info.phase == "Running":
                running[pod.pk] = info.started_at
        result = services.placements_commit(
            cluster=cluster, placed=placed, scheduler=self.identity, now=now
        )
        refused = {pod.pk for pod, _ in result.conflicts}
        adopted: list[Pod] = []
        for pod, decision in placed:
            assert decision.placement is not None
            if pod.pk in refused:
                snapshot.forget(decision.pod, decision.placement)
            else:
                self.cache.bound(decision.pod, decision.placement)
                pod.phase = Pod.Phase.BOUND
                adopted.append(pod)
        counts["pods_adopted"] = counts.get("pods_adopted", 0) + len(adopted)
        return [(pod, running[pod.pk]) for pod in adopted if pod.pk in running]

    def _held_annotations(self, info: PodInfo, obj: Mapping[str, Any]) -> Mapping[str, str]:
        """The pod's annotations, with the GPUs its allocated claims hold as the GPU ids (what
        the DRA driver prepared is what the pod holds, whoever chose it)."""
        spec = self.node_spec(info.node_name)
        held = self.claims.held_gpus(obj, spec) if spec is not None else None
        if held is None:
            return info.annotations
        return {**info.annotations, ANNOTATION_GPU_IDS: ",".join(map(str, held))}


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid") or "")


def _claims(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("spec") or {}).get("resourceClaims"))


def _acts_on(
    info: PodInfo, deleted: bool, phase: str, held_node: str | None, scheduler_name: str
) -> bool:
    """Whether the sync does anything about a mirrored pod whose Pod row is in `phase`, its
    allocation on `held_node` (None: none), the loop of PodMirror.sync decided without the rows:
    it went while active; it is bound and was pending here, or held elsewhere, or started while
    bound; it waits for us unbound while placed here (a bind that never went out)."""
    if deleted or info.terminal:
        return phase in Pod.ACTIVE_PHASES
    if info.node_name:
        return (
            phase == Pod.Phase.PENDING
            or (phase in Pod.PLACED_PHASES and held_node not in (None, info.node_name))
            or (info.phase == "Running" and phase == Pod.Phase.BOUND)
        )
    return info.pending_for(scheduler_name) and phase in Pod.PLACED_PHASES


def _acted_on(info: PodInfo, deleted: bool, pod: Pod) -> bool:
    """Whether the sync writes more about this mirrored pod than where it was seen: it went,
    someone else bound it, or it started (a requeue, rare, reads what it needs itself)."""
    if deleted or info.terminal:
        return pod.phase in Pod.ACTIVE_PHASES
    if not info.node_name:
        return False
    return pod.phase == Pod.Phase.PENDING or (
        info.phase == "Running" and pod.phase == Pod.Phase.BOUND
    )


def _placed_or_ended(obj: Mapping[str, Any]) -> bool:
    """Bound to a node, or finished (read without translating the pod)."""
    phase = (obj.get("status") or {}).get("phase")
    return bool((obj.get("spec") or {}).get("nodeName")) or phase in ("Succeeded", "Failed")
