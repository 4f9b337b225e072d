"""The Kubernetes side of the one scheduling cycle (scheduling.side, scheduling.cycle): gpusched as
a secondary scheduler, placing the pods whose `spec.schedulerName` is the profile's.

- sync: informers (list + watch, kube.informer) mirror nodes (allocatable, GFD labels, topology
  from the annotation or NRT) and pods into the database. Pods pending for us become Pending
  workloads, one per pod or per pod group (kube.groups), admitted by the same queues as
  everything else; pods bound by anyone are counted where they run; finished, deleted or evicted
  pods release what they hold once they are gone. Submitted workloads (the REST API) become real
  pods (kube.materialize). Disruption budgets say which running pods may not be evicted now.
- placeable: the pending pods that exist, are ours, are not gated and not being deleted.
- evict: the Eviction API (policy/v1); a 429 (a disruption budget) refuses it; an accepted pod
  terminates for its grace period and holds what it holds until it is gone; a `Preempted` event
  says who and why.
- bind: the Binding subresource with the chosen GPU ids as annotations, a `Scheduled` event; a
  refused bind (409: bound elsewhere meanwhile; 404: deleted) goes back to the queue.
- report: a `FailedScheduling` event and `PodScheduled=False` once per distinct reason, and
  `status.nominatedNodeName` for a preemptor waiting for its victims.

The informers list and watch on their own threads (`start()`), or one round per sync when
`background` is off (tests, experiments).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from datetime import datetime
from functools import partial
from typing import Any

from django.db import transaction

from kube import groups
from kube import services as kube_services
from kube.adopt import annotations_for, placement_on, single_strategy_ask
from kube.api import BindOutcome, KubeApi
from kube.disruption import protected_uids
from kube.groups import GROUP_OBJECTS, GroupError, GroupRef
from kube.informer import Change, Informer, NrtSource, PeriodicList
from kube.leader import KubernetesLease, LeaseElector, LeaseLost
from kube.materialize import POD_UID_ANNOTATION, Materializer
from kube.models import KubePod
from kube.topology_warnings import TopologyWarnings
from kube.translate import PodInfo, TranslationError, node_spec, pod_info, to_request
from scheduling import services
from scheduling.cache import ClusterCache
from scheduling.cluster_state import pod_request
from scheduling.core.cycle_state import CycleState
from scheduling.core.plugins.gpu_topology import DEFAULT_ANNOTATION
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.status import Status
from scheduling.core.types import NodeSpec
from scheduling.cycle import SchedulingCycle
from scheduling.models import Allocation, Node, Pod, Workload
from scheduling.side import BindRefused, PodEviction, SideSync, Verdict, Waiting

logger = logging.getLogger(__name__)

# Bindings in flight at once (kube-scheduler binds each pod in a goroutine of its own).
BIND_CONCURRENCY = 8
# Terminal pods leave this selector's view with a DELETED event, as in kube-scheduler's informer.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


def topology_annotation(framework: Framework) -> str:
    """The node annotation the profile's topology plugin reads (`topologyAnnotation`)."""
    plugins: list[object] = [p for _, p in framework.filter] + [p for _, p in framework.reserve]
    plugins += [p for _, p, _ in framework.score]
    for plugin in plugins:
        value = getattr(plugin, "annotation", None)
        if isinstance(value, str) and value:
            return value
    return DEFAULT_ANNOTATION


@dataclass
class KubernetesSide:
    api: KubeApi
    scheduler_name: str
    cache: ClusterCache
    annotation: str = DEFAULT_ANNOTATION
    identity: str = "gpusched"
    background: bool = False
    resync_s: float = 300.0
    nrt_interval_s: float = 30.0
    list_interval_s: float = 5.0
    watch_timeout_s: int = 300
    still_leading: Callable[[], bool] = field(default=lambda: True)

    name = "kubernetes"
    evictions_free_at_once = False

    def __post_init__(self) -> None:
        self.nodes = Informer(
            "nodes", self.api.core.list_node, watch_timeout_s=self.watch_timeout_s
        )
        self.pods = Informer(
            "pods",
            self.api.core.list_pod_for_all_namespaces,
            field_selector=ACTIVE_PODS,
            read_func=self.api.read_pod,
            watch_timeout_s=self.watch_timeout_s,
        )
        self.nrt = NrtSource(self.api.custom, interval_s=self.nrt_interval_s)
        self.topology_warnings = TopologyWarnings(self.api)
        self.budgets = PeriodicList(
            "poddisruptionbudgets",
            self.api.policy.list_pod_disruption_budget_for_all_namespaces,
            interval_s=self.list_interval_s,
        )
        self.group_objects = {
            kind: [
                PeriodicList(
                    f"{kind.group}/{version}/{kind.plural}",
                    partial(
                        self.api.custom.list_cluster_custom_object,
                        kind.group,
                        version,
                        kind.plural,
                    ),
                    interval_s=self.list_interval_s,
                )
                for version in kind.versions
            ]
            for kind in GROUP_OBJECTS.values()
        }
        self.materializer = Materializer(self.api, self.scheduler_name)
        self._registered: dict[str, NodeSpec] = {}
        self._warned: set[str] = set()
        self._reported: dict[str, str] = {}  # pod uid -> the last reason told (pods not mirrored)
        self._quarantine_told: dict[str, str] = {}  # node -> the quarantine reason told
        self._resync_at = 0.0
        self._seen_lists = (0, 0)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- informers ------------------------------------------------------------------------------

    def start(self) -> None:
        """List and watch on background threads (the command's mode)."""
        self.background = True
        for informer in (self.nodes, self.pods):
            thread = threading.Thread(
                target=informer.run, args=(self._stop,), name=f"informer-{informer.name}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for informer in (self.nodes, self.pods):
            informer.stop()
        for thread in self._threads:
            thread.join(timeout=5)

    def poll(self) -> None:
        """One list-or-watch round of each informer (the synchronous mode)."""
        for informer in (self.nodes, self.pods):
            informer.step()

    def resync(self) -> None:
        """Trust nothing mirrored: the next sync compares everything (a new leader's term)."""
        self._resync_at = 0.0

    # --- 2. sync --------------------------------------------------------------------------------

    def sync(self, now: datetime) -> SideSync:
        if not self.background:
            self.poll()
        if not (self.nodes.synced.is_set() and self.pods.synced.is_set()):
            return SideSync(ready=False)
        monotonic = time.monotonic()
        lists = (self.nodes.lists, self.pods.lists)
        full = monotonic >= self._resync_at or lists != self._seen_lists
        if full:
            self._resync_at, self._seen_lists = monotonic + self.resync_s, lists
        counts: dict[str, int] = {}
        self._sync_nodes(counts, now, full=full)
        self.budgets.refresh()
        for sources in self.group_objects.values():
            for source in sources:
                source.refresh()
        self._sync_pods(counts, now, full=full)
        counts["pods_created"] = self.materializer.run_once()
        self._tell_quarantine(now)
        current = self.pods.snapshot()
        protected = protected_uids(self.budgets.items.values(), current.values())
        return SideSync(protected=_pod_uids(protected), counts=counts)

    def _tell_quarantine(self, now: datetime) -> None:
        """A Node event when the scheduler stops trusting a node's recorded state (quarantine,
        decided by the cycle after the previous sync), and when it trusts it again."""
        current = dict(
            Node.objects.filter(source=Node.Source.KUBERNETES)
            .exclude(quarantine_reason="")
            .values_list("name", "quarantine_reason")
        )
        nodes = self.nodes.snapshot()
        for name in sorted(set(current) | set(self._quarantine_told)):
            reason = current.get(name, "")
            if self._quarantine_told.get(name, "") == reason:
                continue
            uid = str(((nodes.get(name) or {}).get("metadata") or {}).get("uid") or "")
            self.api.node_event(
                node=name,
                uid=uid,
                kind="Warning" if reason else "Normal",
                reason="Quarantined" if reason else "QuarantineLifted",
                action="Scheduling",
                note=f"gpusched places nothing here: {reason}"
                if reason
                else "gpusched trusts this node's recorded state again",
                now=now,
            )
            if reason:
                self._quarantine_told[name] = reason
            else:
                self._quarantine_told.pop(name, None)

    def _sync_nodes(self, counts: dict[str, int], now: datetime, *, full: bool) -> None:
        nrt_changed = self.nrt.refresh()
        changes: dict[str, Change] = self.nodes.drain()
        if full or nrt_changed:
            current = self.nodes.snapshot()
            changes.update({key: (obj, False) for key, obj in current.items()})
            known = Node.objects.filter(source=Node.Source.KUBERNETES, cordoned=False)
            for name in known.values_list("name", flat=True):
                if name not in current:
                    changes[name] = ({"metadata": {"name": name}}, True)
        for name, (obj, deleted) in sorted(changes.items()):
            if deleted:
                kube_services.node_gone(name=name)
                self._registered.pop(name, None)
                self.topology_warnings.forget(name)
                counts["nodes_gone"] = counts.get("nodes_gone", 0) + 1
                continue
            try:
                facts = node_spec(obj, nrt=self.nrt.by_node.get(name), annotation=self.annotation)
            except TranslationError as exc:
                self._warn_once(f"node:{name}:{exc}", "node %s not mirrored: %s", name, exc)
                continue
            for warning in facts.warnings:
                self._warn_once(f"node:{warning}", "%s", warning)
            self.topology_warnings.observe(obj, facts, now)
            if self._registered.get(name) != facts.spec:
                kube_services.node_apply(spec=facts.spec)
                self._registered[name] = facts.spec
                counts["nodes_applied"] = counts.get("nodes_applied", 0) + 1

    def _sync_pods(self, counts: dict[str, int], now: datetime, *, full: bool) -> None:
        changes = self.pods.drain()
        if full:
            current = self.pods.snapshot()
            changes.update({key: (obj, False) for key, obj in current.items()})
            live = {(obj.get("metadata") or {}).get("uid") for obj in current.values()}
            stale = KubePod.objects.filter(pod__phase__in=Pod.ACTIVE_PHASES).exclude(uid__in=live)
            for gone in stale:
                doc = {"metadata": {"uid": gone.uid, "namespace": gone.namespace}}
                doc["metadata"]["name"] = gone.name
                changes[f"gone/{gone.uid}"] = (doc, True)
        if not changes:
            return
        infos = [(pod_info(obj), deleted, obj) for obj, deleted in changes.values()]
        mirrored = {
            kp.uid: kp
            for kp in KubePod.objects.filter(uid__in=[info.uid for info, _, _ in infos])
            .select_related("pod__workload__tenant")
            .order_by("id")
        }
        held_on = dict(
            Allocation.objects.filter(
                active=True, pod_id__in=[kp.pod_id for kp in mirrored.values()]
            ).values_list("pod_id", "node__name")
        )
        bound_by_others: list[tuple[PodInfo, KubePod | None]] = []
        started: list[Pod] = []
        singles: list[PodInfo] = []
        grouped: dict[str, GroupRef] = {}
        for info, deleted, obj in infos:
            kube_pod = mirrored.get(info.uid)
            if deleted or info.terminal:
                if kube_pod is not None and kube_pod.pod.phase in Pod.ACTIVE_PHASES:
                    kube_services.pod_gone(
                        kube_pod=kube_pod, succeeded=info.phase == "Succeeded", now=now
                    )
                    counts["pods_released"] = counts.get("pods_released", 0) + 1
                self._reported.pop(info.uid, None)
                continue
            if info.node_name:
                if kube_pod is None:
                    if info.ask is not None and not info.ask.empty:
                        bound_by_others.append((info, None))
                    continue
                kube_services.kube_pod_seen(kube_pod=kube_pod, info=info)
                pod = kube_pod.pod
                if pod.phase in Pod.PLACED_PHASES and held_on.get(pod.pk) not in (
                    None,
                    info.node_name,
                ):
                    kube_services.pod_requeue(pod=pod, reason="bound elsewhere", now=now)
                    counts["requeued"] = counts.get("requeued", 0) + 1
                if pod.phase == Pod.Phase.PENDING:
                    bound_by_others.append((info, kube_pod))  # someone else bound our pod
                elif info.phase == "Running":
                    started.append(pod)
                continue
            if not info.pending_for(self.scheduler_name):
                continue
            if kube_pod is not None:
                if kube_pod.pod.phase in Pod.PLACED_PHASES:
                    # In the database but not in the cluster: a bind that never went out (a
                    # crash between commit and bind). Give it back and try again.
                    kube_services.pod_requeue(pod=kube_pod.pod, reason="not bound", now=now)
                    counts["requeued"] = counts.get("requeued", 0) + 1
                continue
            if self._link_made(info):
                continue
            if info.ask is None:
                self._tell(info, f"gpusched cannot schedule this pod: {info.error}", now)
                continue
            ref = groups.group_of(obj)
            if ref is None:
                singles.append(info)
            else:
                grouped[ref.key] = ref
        with transaction.atomic():  # one commit for a burst of new pods, not one each
            mirrored_now = sum(self._mirror([info], info.name, None, now) for info in singles)
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

    def _mirror_group(self, ref: GroupRef, now: datetime) -> int:
        """The group's pods pending for us and not mirrored yet join its workload, or become one
        once there are as many as its quorum; until then they wait, told why."""
        members: list[tuple[PodInfo, dict[str, Any]]] = []
        known: list[str] = []
        for obj in self.pods.snapshot().values():
            if groups.group_of(obj) != ref:
                continue
            info = pod_info(obj)
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
                self._tell(info, f"WaitingForGang: {exc}", now)
            return 0
        if needed is not None and len(fresh) < needed:
            for info, _ in fresh:
                self._tell(
                    info,
                    f"WaitingForGang: {len(fresh)} of {needed} pods of group {ref.name} exist",
                    now,
                )
            return 0
        return len(fresh) if self._mirror([i for i, _ in fresh], ref.name, needed, now) else 0

    def _mirror(
        self, members: list[PodInfo], name: str, min_count: int | None, now: datetime
    ) -> bool:
        """Mirror pods as one workload; what the database refuses (a WorkloadPriorityClass
        label naming no class) is told on the pods instead."""
        try:
            kube_services.workload_mirror(name=name, members=members, min_count=min_count)
        except services.ServiceError as exc:
            for info in members:
                self._tell(info, f"gpusched cannot schedule this pod: {exc}", now)
            return False
        return True

    def _adopt(
        self,
        pending: list[tuple[PodInfo, KubePod | None]],
        counts: dict[str, int],
        now: datetime,
    ) -> list[Pod]:
        """Count pods bound by someone else where they run."""
        cluster = self.cache.state()
        snapshot = cluster.snapshot
        placed: list[tuple[Pod, Decision]] = []
        running: set[int] = set()
        for info, kube_pod in pending:
            if kube_pod is not None:
                pod = kube_pod.pod
                request = pod_request(pod)
            else:
                assert info.ask is not None
                ask = single_strategy_ask(snapshot, info.node_name, info.ask)
                request = to_request(info.uid, info.name, info.namespace, info.priority or 0, ask)
            placement = placement_on(snapshot, info.node_name, request, info.annotations)
            if placement is None:
                self._warn_once(
                    f"adopt:{info.uid}",
                    "pod %s on %s is not counted: the node is unknown or full in our view",
                    info.key,
                    info.node_name,
                )
                continue
            if kube_pod is None:
                pod = kube_services.workload_mirror_admitted(info=info)
                request = pod_request(pod)
            snapshot.assume(request, placement)
            decision = Decision(
                request, Status.success(), [placement.node], CycleState(), placement=placement
            )
            placed.append((pod, decision))
            if info.phase == "Running":
                running.add(pod.pk)
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
        return [pod for pod in adopted if pod.pk in running]

    # --- 5. placeable ---------------------------------------------------------------------------

    def placeable(self, pods: Sequence[Pod]) -> list[Pod]:
        links = {kp.pod_id: kp for kp in KubePod.objects.filter(pod__in=list(pods), owned=True)}
        current = self.pods.snapshot()
        out = []
        for pod in pods:
            link = links.get(pod.pk)
            obj = current.get(f"{link.namespace}/{link.name}") if link is not None else None
            if link is None or obj is None:
                continue
            info = pod_info(obj)
            if info.uid == link.uid and info.pending_for(self.scheduler_name):
                out.append(pod)
        return out

    # --- 8. evict -------------------------------------------------------------------------------

    def evict(self, evictions: Sequence[PodEviction], now: datetime) -> dict[str, Verdict]:
        links = {kp.pod_id: kp for kp in KubePod.objects.filter(pod__in=[e.pod for e in evictions])}
        verdicts: dict[str, Verdict] = {}
        for eviction in evictions:
            link = links.get(eviction.pod.pk)
            if link is None:  # never reached the cluster: nothing runs, nothing to wait for
                verdicts[str(eviction.pod.uid)] = Verdict.GONE
                continue
            outcome = self.api.evict(namespace=link.namespace, name=link.name, uid=link.uid)
            if outcome.refused:
                verdicts[str(eviction.pod.uid)] = Verdict.REFUSED
                logger.info("eviction of %s refused: %s", link, outcome.message)
            elif outcome.accepted:
                verdicts[str(eviction.pod.uid)] = Verdict.TERMINATING
                self.api.event(
                    namespace=link.namespace,
                    pod_name=link.name,
                    pod_uid=link.uid,
                    kind="Normal",
                    reason="Preempted",
                    action="Preempting",
                    note=eviction.reason,
                    now=now,
                )
            elif outcome.status == 404:
                verdicts[str(eviction.pod.uid)] = Verdict.TERMINATING  # gone: its DELETED comes
            else:
                verdicts[str(eviction.pod.uid)] = Verdict.REFUSED
                logger.warning(
                    "eviction of %s failed: %s %s", link, outcome.status, outcome.message
                )
        return verdicts

    # --- 10. bind -------------------------------------------------------------------------------

    def bind(self, placed: Sequence[tuple[Pod, Decision]], now: datetime) -> list[BindRefused]:
        """Bindings (and their `Scheduled` events) go out several at a time, as kube-scheduler's
        binding cycles run beside each other; what the API server refuses is handled here after
        (the database is written from this thread only)."""
        links = {kp.pod_id: kp for kp in KubePod.objects.filter(pod__in=[p for p, _ in placed])}

        def make_real(item: tuple[Pod, Decision]) -> BindOutcome | None:
            pod, decision = item
            if not self.still_leading():
                return None  # not ours to bind any more
            placement = decision.placement
            assert placement is not None
            link = links[pod.pk]
            outcome = self.api.bind(
                namespace=link.namespace,
                name=link.name,
                uid=link.uid,
                node=placement.node,
                annotations=annotations_for(placement),
            )
            if outcome.ok:
                self.api.event(
                    namespace=link.namespace,
                    pod_name=link.name,
                    pod_uid=link.uid,
                    kind="Normal",
                    reason="Scheduled",
                    action="Binding",
                    note=f"Successfully assigned {link.namespace}/{link.name} to {placement.node}",
                    now=now,
                )
            return outcome

        with ThreadPoolExecutor(max_workers=BIND_CONCURRENCY) as pool:
            outcomes = list(pool.map(make_real, placed))
        refused: list[BindRefused] = []
        lost = [pod for (pod, _), outcome in zip(placed, outcomes, strict=True) if outcome is None]
        for (pod, decision), outcome in zip(placed, outcomes, strict=True):
            if outcome is None or outcome.ok:
                continue
            # Refused (409: bound elsewhere meanwhile, or not the pod we saw; 404: deleted): the
            # reservation goes back and the pod is tried again, or dropped once its deletion is
            # seen.
            assert decision.placement is not None
            logger.info(
                "bind of %s to %s refused: %s",
                links[pod.pk],
                decision.placement.node,
                outcome.message,
            )
            reason = outcome.message or str(outcome.status)
            kube_services.pod_requeue(pod=pod, reason=reason, now=now)
            refused.append(BindRefused(pod, reason, conflict=outcome.conflict))
        if lost:
            for pod in lost:
                kube_services.pod_requeue(pod=pod, reason="lease lost", now=now)
            raise LeaseLost(f"{self.identity} stopped leading before binding {lost[0].name}")
        return refused

    # --- 11. report -----------------------------------------------------------------------------

    def report(self, waiting: Sequence[Waiting], now: datetime) -> int:
        links = {kp.pod_id: kp for kp in KubePod.objects.filter(pod__in=[w.pod for w in waiting])}
        told = 0
        for item in waiting:
            link = links.get(item.pod.pk)
            if link is None or not item.message or item.message == link.reported_reason:
                continue
            self._tell_unschedulable(link.namespace, link.name, link.uid, item.message, now)
            if item.nominated_node:
                self.api.mark_nominated(
                    namespace=link.namespace, name=link.name, node=item.nominated_node
                )
            kube_services.kube_pod_reported(kube_pod=link, reason=item.message)
            told += 1
        return told

    def _tell(self, info: PodInfo, message: str, now: datetime) -> None:
        """Why a pod that is not mirrored (yet) waits, once per distinct reason."""
        if self._reported.get(info.uid) == message:
            return
        self._reported[info.uid] = message
        reason = "SchedulerError" if message.startswith("gpusched cannot") else "Unschedulable"
        self._tell_unschedulable(info.namespace, info.name, info.uid, message, now, reason)

    def _tell_unschedulable(
        self,
        namespace: str,
        name: str,
        uid: str,
        message: str,
        now: datetime,
        reason: str = "Unschedulable",
    ) -> None:
        self.api.event(
            namespace=namespace,
            pod_name=name,
            pod_uid=uid,
            kind="Warning",
            reason="FailedScheduling",
            action="Scheduling",
            note=message,
            now=now,
        )
        self.api.mark_unschedulable(
            namespace=namespace, name=name, message=message, now=now, reason=reason
        )

    def _warn_once(self, key: str, message: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(message, *args)


def _pod_uids(kube_uids: frozenset[str]) -> frozenset[str]:
    """Our Pod uids of the Kubernetes pods with these uids."""
    return frozenset(
        str(uid)
        for uid in KubePod.objects.filter(uid__in=list(kube_uids)).values_list(
            "pod__uid", flat=True
        )
    )


def kubernetes_cycle(
    api: KubeApi,
    framework: Framework,
    elector: LeaseElector | None,
    *,
    identity: str,
    **options: Any,
) -> SchedulingCycle:
    """The scheduling cycle on the Kubernetes side (what `runkube` runs); `options` go to the
    side where it has them (watch_timeout_s, background, resync_s, ...), else to the cycle."""
    cache = options.pop("cache", None) or ClusterCache()
    lease = KubernetesLease(elector)
    side_fields = {f.name for f in fields(KubernetesSide)}
    side = KubernetesSide(
        api,
        framework.profile.scheduler_name,
        cache,
        annotation=topology_annotation(framework),
        identity=identity,
        still_leading=lease.still_leading,
        **{k: v for k, v in options.items() if k in side_fields},
    )
    return SchedulingCycle(
        framework,
        side,
        lease,
        identity=identity,
        cache=cache,
        **{k: v for k, v in options.items() if k not in side_fields},
    )
