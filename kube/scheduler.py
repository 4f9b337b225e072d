"""gpusched as a secondary Kubernetes scheduler: pods with `spec.schedulerName` equal to the
profile's schedulerName are placed by the same core and profile as everything else.

One cycle (`run_once`), as numbered phases:
1. lead or stand by: renew (or try to take) the coordination.k8s.io Lease; a replica that loses it
   raises LeaseLost and must exit, like kube-scheduler;
2. mirror nodes into the database (allocatable, GFD labels, topology from the annotation or NRT);
3. mirror pods: ours that wait (no node, no scheduling gates) become pending one-pod workloads;
   pods bound by anyone are counted where they run; finished or deleted pods release what they hold;
4. take a batch of our pending pods in queue order and schedule each into the snapshot;
5. record the placements in the database (its constraints refuse any over-commit), then bind each
   through the Binding subresource with the chosen GPU ids as annotations and a `Scheduled` event;
   a refused bind (409: bound elsewhere meanwhile) releases the reservation and requeues the pod;
6. for the pods that do not fit: backoff, a `FailedScheduling` event and `PodScheduled=False` with
   the summarized reasons (once per distinct reason, not every attempt).

The informers list and watch on their own threads (`start()`), or one round per cycle when
`background` is off (tests).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cmp_to_key
from typing import Any

from django.db.models import Q
from django.utils import timezone

from kube import services as kube_services
from kube.adopt import annotations_for, placement_on, single_strategy_ask
from kube.api import KubeApi
from kube.informer import Change, Informer, NrtSource
from kube.leader import LeaseElector, LeaseLost
from kube.models import KubePod
from kube.topology_warnings import TopologyWarnings
from kube.translate import PodInfo, TranslationError, node_spec, pod_info, to_request
from scheduling import selectors, services
from scheduling.cache import ClusterCache
from scheduling.core.cycle_state import CycleState
from scheduling.core.plugins.gpu_topology import DEFAULT_ANNOTATION
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.status import Code, Status
from scheduling.core.types import NodeSpec
from scheduling.models import Node, Pod, Workload

logger = logging.getLogger(__name__)

# Terminal pods leave this selector's view with a DELETED event, as in kube-scheduler's informer.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"


@dataclass
class KubeReport:
    leading: bool = False
    synced: bool = False
    nodes_applied: int = 0
    nodes_gone: int = 0
    pods_mirrored: int = 0
    pods_adopted: int = 0
    pods_released: int = 0
    attempted: int = 0
    bound: int = 0
    conflicts: int = 0
    requeued: int = 0
    unschedulable: int = 0
    events: int = 0
    more: bool = False


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
class KubeScheduler:
    api: KubeApi
    framework: Framework
    elector: LeaseElector | None
    identity: str
    batch_size: int = 200
    clock: Callable[[], datetime] = timezone.now
    background: bool = False
    resync_s: float = 300.0
    nrt_interval_s: float = 30.0
    watch_timeout_s: int = 300
    cache: ClusterCache = field(default_factory=ClusterCache)

    def __post_init__(self) -> None:
        self.scheduler_name = self.framework.profile.scheduler_name
        self.annotation = topology_annotation(self.framework)
        self.nodes = Informer(
            "nodes", self.api.core.list_node, watch_timeout_s=self.watch_timeout_s
        )
        self.pods = Informer(
            "pods",
            self.api.core.list_pod_for_all_namespaces,
            field_selector=ACTIVE_PODS,
            watch_timeout_s=self.watch_timeout_s,
        )
        self.nrt = NrtSource(self.api.custom, interval_s=self.nrt_interval_s)
        self.topology_warnings = TopologyWarnings(self.api)
        self._registered: dict[str, NodeSpec] = {}
        self._warned: set[str] = set()
        self._invalid_reported: dict[str, str] = {}
        self._was_leading = False
        self._lease_checked_at: float | None = None
        self._resync_at = 0.0
        self._seen_lists = (0, 0)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._kube_of: dict[int, KubePod] = {}

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

    # --- the cycle ------------------------------------------------------------------------------

    def run_once(self) -> KubeReport:
        try:
            return self._cycle()
        except Exception:
            self.cache.invalidate()
            raise

    def _cycle(self) -> KubeReport:
        report = KubeReport()
        if not self.background:
            self.poll()

        # 1. Lead, or stand by. A leader that lost the lease stops for good.
        if not self._lead():
            return report
        report.leading = True
        if not (self.nodes.synced.is_set() and self.pods.synced.is_set()):
            return report  # nothing is decided on a partial view
        report.synced = True
        now = self.clock()
        monotonic = time.monotonic()
        lists = (self.nodes.lists, self.pods.lists)
        full = monotonic >= self._resync_at or lists != self._seen_lists
        if full:
            self._resync_at, self._seen_lists = monotonic + self.resync_s, lists

        # 2-3. Mirror nodes, then pods.
        self._sync_nodes(report, full=full)
        self._sync_pods(report, now, full=full)

        # 4-6. Schedule our pending pods.
        self._schedule(report, now)
        return report

    def _lead(self) -> bool:
        elector = self.elector
        if elector is None:
            return True
        due = (
            self._lease_checked_at is None
            or elector.monotonic() - self._lease_checked_at >= elector.retry_period_s
            or not elector.leading()
        )
        if due:
            self._lease_checked_at = elector.monotonic()
            elector.try_acquire_or_renew()
        if elector.lost:
            self._was_leading = False
            raise LeaseLost(f"{self.identity} lost lease {elector.namespace}/{elector.name}")
        if not elector.leading():
            self._was_leading = False
            return False
        if not self._was_leading:  # just became leader: trust nothing cached, resync everything
            self._was_leading = True
            self._resync_at = 0.0
            self.cache.invalidate()
        return True

    def stand_down(self) -> None:
        if self.elector is not None:
            self.elector.release()

    # --- 2. nodes -------------------------------------------------------------------------------

    def _sync_nodes(self, report: KubeReport, *, full: bool) -> None:
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
                report.nodes_gone += 1
                continue
            try:
                facts = node_spec(obj, nrt=self.nrt.by_node.get(name), annotation=self.annotation)
            except TranslationError as exc:
                self._warn_once(f"node:{name}:{exc}", "node %s not mirrored: %s", name, exc)
                continue
            for warning in facts.warnings:
                self._warn_once(f"node:{warning}", "%s", warning)
            self.topology_warnings.observe(obj, facts, self.clock())
            if self._registered.get(name) != facts.spec:
                kube_services.node_apply(spec=facts.spec)
                self._registered[name] = facts.spec
                report.nodes_applied += 1

    # --- 3. pods --------------------------------------------------------------------------------

    def _sync_pods(self, report: KubeReport, now: datetime, *, full: bool) -> None:
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
        infos = [(pod_info(obj), deleted) for obj, deleted in changes.values()]
        mirrored = {
            kp.uid: kp
            for kp in KubePod.objects.filter(uid__in=[info.uid for info, _ in infos])
            .select_related("pod__workload__tenant")
            .order_by("id")
        }
        to_adopt: list[tuple[PodInfo, KubePod | None]] = []
        started: list[Pod] = []
        for info, deleted in infos:
            kube_pod = mirrored.get(info.uid)
            if deleted or info.terminal:
                if kube_pod is not None and kube_pod.pod.phase in Pod.ACTIVE_PHASES:
                    kube_services.pod_gone(
                        pod=kube_pod.pod, succeeded=info.phase == "Succeeded", now=now
                    )
                    report.pods_released += 1
                self._invalid_reported.pop(info.uid, None)
                continue
            if info.node_name:
                if kube_pod is None:
                    if info.ask is not None and not info.ask.empty:
                        to_adopt.append((info, None))
                    continue
                kube_services.kube_pod_seen(kube_pod=kube_pod, info=info)
                pod = kube_pod.pod
                if pod.phase in Pod.PLACED_PHASES and self._held_node(pod) not in (
                    None,
                    info.node_name,
                ):
                    kube_services.pod_requeue(pod=pod, reason="bound elsewhere", now=now)
                    report.requeued += 1
                if pod.phase == Pod.Phase.PENDING:
                    to_adopt.append((info, kube_pod))  # someone else bound our pod
                elif info.phase == "Running":
                    started.append(pod)
                continue
            if info.pending_for(self.scheduler_name):
                if kube_pod is None:
                    if info.ask is None:
                        self._report_invalid(info, report, now)
                    else:
                        kube_services.pod_submit(info=info, ask=info.ask, owned=True, now=now)
                        report.pods_mirrored += 1
                elif kube_pod.pod.phase in Pod.PLACED_PHASES:
                    # In the database but not in the cluster: a bind that never went out (a crash
                    # between commit and bind). Give it back and try again.
                    kube_services.pod_requeue(pod=kube_pod.pod, reason="not bound", now=now)
                    report.requeued += 1
        if to_adopt:
            started += self._adopt(to_adopt, report, now)
        if started:
            kube_services.pods_started(pods=started, now=now)

    def _held_node(self, pod: Pod) -> str | None:
        allocation = pod.allocations.filter(active=True).select_related("node").first()
        return allocation.node.name if allocation else None

    def _adopt(
        self, pending: list[tuple[PodInfo, KubePod | None]], report: KubeReport, now: datetime
    ) -> list[Pod]:
        """Count pods bound by someone else where they run."""
        cluster = self.cache.state()
        snapshot = cluster.snapshot
        placed: list[tuple[Pod, Decision]] = []
        running: set[int] = set()
        for info, kube_pod in pending:
            ask = None
            if kube_pod is not None:
                request = selectors.pod_request(kube_pod.pod)
            else:
                assert info.ask is not None
                ask = single_strategy_ask(snapshot, info.node_name, info.ask)
                request = to_request(info.uid, info.name, info.namespace, info.priority, ask)
            placement = placement_on(snapshot, info.node_name, request, info.annotations)
            if placement is None:
                self._warn_once(
                    f"adopt:{info.uid}",
                    "pod %s on %s is not counted: the node is unknown or full in our view",
                    info.key,
                    info.node_name,
                )
                continue
            if ask is not None:
                pod = kube_services.pod_submit(info=info, ask=ask, owned=False, now=now)
                request = selectors.pod_request(pod)
            else:
                assert kube_pod is not None
                pod = kube_pod.pod
            snapshot.assume(request, placement)
            decision = Decision(
                request, Status.success(), [placement.node], CycleState(), placement=placement
            )
            placed.append((pod, decision))
            if info.phase == "Running":
                running.add(pod.pk)
        result = kube_services.pods_bind(
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
        report.pods_adopted += len(adopted)
        return [pod for pod in adopted if pod.pk in running]

    def _report_invalid(self, info: PodInfo, report: KubeReport, now: datetime) -> None:
        if self._invalid_reported.get(info.uid) == info.error:
            return
        self._invalid_reported[info.uid] = info.error
        message = f"gpusched cannot schedule this pod: {info.error}"
        self._tell_unschedulable(
            info.namespace, info.name, info.uid, message, now, "SchedulerError"
        )
        report.events += 1

    # --- 4-6. scheduling ------------------------------------------------------------------------

    def _schedule(self, report: KubeReport, now: datetime) -> None:
        queued = list(
            KubePod.objects.filter(
                owned=True,
                pod__phase=Pod.Phase.PENDING,
                pod__workload__state__in=(Workload.State.ADMITTED, Workload.State.RUNNING),
            )
            .filter(Q(pod__next_attempt_at__isnull=True) | Q(pod__next_attempt_at__lte=now))
            .select_related("pod__workload__tenant")
            .order_by("-pod__priority", "pod__created_at", "pod__id")[: self.batch_size]
        )
        current = self.pods.snapshot()
        self._kube_of = {}
        waiting = []
        for kube_pod in queued:
            obj = current.get(f"{kube_pod.namespace}/{kube_pod.name}")
            info = pod_info(obj) if obj is not None else None
            if (
                info is not None
                and info.uid == kube_pod.uid
                and info.pending_for(self.scheduler_name)
            ):
                waiting.append(kube_pod.pod)
                self._kube_of[kube_pod.pod.pk] = kube_pod
        if not waiting:
            return
        requests = {pod.pk: selectors.pod_request(pod) for pod in waiting}
        if self.framework.queue_sort is not None:
            less = self.framework.queue_sort.less
            waiting.sort(
                key=cmp_to_key(lambda a, b: -1 if less(requests[a.pk], requests[b.pk]) else 1)
            )
        cluster = self.cache.state()
        placed: list[tuple[Pod, Decision]] = []
        failed: list[tuple[Pod, Decision]] = []
        for pod in waiting:
            decision = self.framework.schedule_one(requests[pod.pk], cluster.snapshot)
            if decision.placement is not None and decision.status.code is Code.SUCCESS:
                placed.append((pod, decision))
            else:
                if decision.placement is not None:  # Permit said wait: no gangs here yet
                    self.framework.forget(decision, cluster.snapshot)
                failed.append((pod, decision))
        report.attempted = len(waiting)
        report.more = len(queued) == self.batch_size

        # 5. Database first (its constraints refuse over-commit), then the API server.
        result = kube_services.pods_bind(
            cluster=cluster, placed=placed, scheduler=self.identity, now=now
        )
        refused = {pod.pk for pod, _ in result.conflicts}
        committed = []
        for pod, decision in placed:
            if pod.pk in refused:
                self.framework.forget(decision, cluster.snapshot)
                report.conflicts += 1
            else:
                committed.append((pod, decision))
        for k, (pod, decision) in enumerate(committed):
            if self.elector is not None and not self.elector.leading():
                for later, later_decision in committed[k:]:
                    self.framework.forget(later_decision, cluster.snapshot)
                    kube_services.pod_requeue(pod=later, reason="lease lost", now=now)
                raise LeaseLost(f"{self.identity} stopped leading before binding {pod.name}")
            self._bind(pod, decision, cluster, report, now)

        # 6. Why the others wait.
        services.pods_unschedulable(failed=failed, now=now)
        report.unschedulable = len(failed)
        for pod, _ in failed:
            kube_pod = self._kube_of[pod.pk]
            if pod.last_reason and pod.last_reason != kube_pod.reported_reason:
                self._tell_unschedulable(
                    kube_pod.namespace, kube_pod.name, kube_pod.uid, pod.last_reason, now
                )
                kube_services.kube_pod_reported(kube_pod=kube_pod, reason=pod.last_reason)
                report.events += 1

    def _bind(
        self,
        pod: Pod,
        decision: Decision,
        cluster: selectors.ClusterState,
        report: KubeReport,
        now: datetime,
    ) -> None:
        placement = decision.placement
        assert placement is not None
        kube_pod = self._kube_of[pod.pk]
        outcome = self.api.bind(
            namespace=kube_pod.namespace,
            name=kube_pod.name,
            uid=kube_pod.uid,
            node=placement.node,
            annotations=annotations_for(placement),
        )
        if outcome.ok:
            self.cache.bound(decision.pod, placement)
            report.bound += 1
            self.api.event(
                namespace=kube_pod.namespace,
                pod_name=kube_pod.name,
                pod_uid=kube_pod.uid,
                kind="Normal",
                reason="Scheduled",
                action="Binding",
                note=f"Successfully assigned {kube_pod.namespace}/{kube_pod.name} "
                f"to {placement.node}",
                now=now,
            )
            report.events += 1
            return
        # Refused (409: bound elsewhere meanwhile, or not the pod we saw; 404: deleted): the
        # reservation goes back and the pod is tried again, or dropped once its deletion is seen.
        logger.info("bind of %s to %s refused: %s", kube_pod, placement.node, outcome.message)
        self.framework.forget(decision, cluster.snapshot)
        kube_services.pod_requeue(pod=pod, reason=outcome.message or str(outcome.status), now=now)
        report.requeued += 1
        if outcome.conflict:
            report.conflicts += 1

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
