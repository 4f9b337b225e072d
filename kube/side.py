"""The Kubernetes side of the one scheduling cycle (scheduling.worker.side,
scheduling.worker.cycle): gpusched as a secondary scheduler, placing the pods whose
`spec.schedulerName` is the profile's.

- sync: informers (list + watch, kube.informer) mirror nodes (allocatable, GFD labels, topology
  from the annotation or NRT; with DRA, the GPUs of their ResourceSlices) here, and pods into the
  database (kube.pod_sync, their ResourceClaims in their ask: kube.claims), and batch/v1 Jobs
  queued Kueue's way become workloads, resumed once admitted (kube.jobs). Submitted workloads
  (the REST API) become real pods (kube.materialize). Disruption budgets say which running pods
  may not be evicted now. Kueue's queue objects are the queues where they exist, or Kueue admits
  (kube.kueue).
- placeable: the pending pods that exist, are ours, are not gated and not being deleted.
- evict, bind: the Eviction API (a Job's workload: its Job suspended, kube.jobs); the claims'
  allocation, then the Binding (kube.binder).
- report: why pods wait and nodes are quarantined (kube.teller).

The informers list and watch on their own threads (`start()`), or one round per sync when
`background` is off (tests, experiments).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from functools import partial
from typing import Any

from kube import services as kube_services
from kube.api import KubeApi
from kube.binder import Binder, evict
from kube.binding_process import BindingProcess, Connection, Reporter
from kube.claims import ClaimBook, dra_node
from kube.disruption import protected_uids
from kube.groups import GROUP_OBJECTS
from kube.informer import Change, Informer, NrtSource, PeriodicList
from kube.jobs import JobBook
from kube.kueue import GPUSCHED, KueueObjects
from kube.leader import KubernetesLease, LeaseElector
from kube.materialize import Materializer
from kube.models import KubePod
from kube.nrt import NrtInfo
from kube.pod_sync import PodMirror
from kube.teller import Teller
from kube.topology_warnings import TopologyWarnings
from kube.translate import NodeFacts, TranslationError, node_spec, pod_info
from scheduling.core.plugins.gpu_topology import DEFAULT_ANNOTATION
from scheduling.core.scheduler import Decision, Framework
from scheduling.core.types import NodeSpec
from scheduling.models import Node, Pod, Workload
from scheduling.worker.cache import ClusterCache
from scheduling.worker.cycle import SchedulingCycle
from scheduling.worker.side import (
    Binding,
    NodeAnswer,
    PodEviction,
    SideSync,
    Verdict,
    Waiting,
)

logger = logging.getLogger(__name__)

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
    admission: str = GPUSCHED  # or kube.kueue.KUEUE: Kueue admits, gpusched places
    kueue_config: str = ""  # "namespace/name" of Kueue's manager ConfigMap (admission fair sharing)
    still_leading: Callable[[], bool] = field(default=lambda: True)
    # Where the binding process connects from (kube.binding_process); None: Bindings go out on
    # this process's threads (tests, lock-step experiments).
    binding_connection: Connection | None = None
    # What paces the periodic lists and the full resync: the wall clock in `runkube`, the
    # simulated clock in a lock-step experiment (so its decisions do not depend on how fast the
    # machine ran each simulated minute).
    monotonic: Callable[[], float] = time.monotonic

    name = "kubernetes"
    evictions_free_at_once = False
    tells_pods = True

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
        self.jobs = JobBook(
            self.api,
            scheduler_name=self.scheduler_name,
            queues_admit=lambda: self.queues_admit,
            warn_once=self._warn_once,
            watch_timeout_s=self.watch_timeout_s,
        )
        self.nrt = NrtSource(
            self.api.custom, interval_s=self.nrt_interval_s, monotonic=self.monotonic
        )
        self.topology_warnings = TopologyWarnings(self.api)
        self.budgets = PeriodicList(
            "poddisruptionbudgets",
            self.api.policy.list_pod_disruption_budget_for_all_namespaces,
            interval_s=self.list_interval_s,
            monotonic=self.monotonic,
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
                    monotonic=self.monotonic,
                )
                for version in kind.versions
            ]
            for kind in GROUP_OBJECTS.values()
        }
        self.materializer = Materializer(self.api, self.scheduler_name)
        self.kueue = KueueObjects(
            self.api,
            admission=self.admission,
            manager_config=self.kueue_config,
            interval_s=self.list_interval_s,
            monotonic=self.monotonic,
        )
        self.claims = ClaimBook(self.api, interval_s=self.list_interval_s, monotonic=self.monotonic)
        self.teller = Teller(self.api)
        self._registered: dict[str, NodeSpec] = {}
        # Each node's last translation, with what it was read from (_node_facts).
        self._translated: dict[str, tuple[tuple[str, NrtInfo | None, tuple[Any, ...]], NodeFacts]]
        self._translated = {}
        self._warned: set[str] = set()
        self.mirror = PodMirror(
            pods=self.pods,
            scheduler_name=self.scheduler_name,
            cache=self.cache,
            identity=self.identity,
            teller=self.teller,
            claims=self.claims,
            group_objects=self.group_objects,
            queues_admit=lambda: self.queues_admit,
            node_spec=self._registered.get,
            warn_once=self._warn_once,
            binding=lambda: self.binder.in_flight,
        )
        self.binder = Binder(
            self.api,
            self.claims,
            identity=self.identity,
            still_leading=self.still_leading,
            pods=self.pods.snapshot,
            node_spec=self._registered.get,
            process=self._binding_process(),
        )
        self._resync_at = 0.0
        self._seen_lists: tuple[int, ...] = ()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- informers ------------------------------------------------------------------------------

    def start(self) -> None:
        """List and watch on background threads (the command's mode)."""
        self.background = True
        for informer in self._informers():
            thread = threading.Thread(
                target=informer.run, args=(self._stop,), name=f"informer-{informer.name}"
            )
            thread.daemon = True
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for informer in self._informers():
            informer.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        if self.binder.process is not None:
            self.binder.process.close()

    def _binding_process(self) -> BindingProcess | None:
        if self.binding_connection is None:
            return None
        reporter = Reporter(
            self.api.reporting_instance, self.api.reporting_controller, self.api.timeout_s
        )
        return BindingProcess(self.binding_connection, reporter)

    def poll(self) -> None:
        """One list-or-watch round of each informer (the synchronous mode)."""
        for informer in self._informers():
            informer.step()

    def _informers(self) -> tuple[Informer, ...]:
        return (self.nodes, self.pods, self.jobs.informer)

    def resync(self) -> None:
        """Trust nothing mirrored: the next sync compares everything (a new leader's term)."""
        self._resync_at = 0.0

    @property
    def queues_admit(self) -> bool:
        return self.kueue.queues_admit

    # --- 2. sync --------------------------------------------------------------------------------

    def sync(self, now: datetime) -> SideSync:
        if not self.background:
            self.poll()
        if not all(informer.synced.is_set() for informer in self._informers()):
            return SideSync(ready=False)
        monotonic = self.monotonic()
        lists = tuple(informer.lists for informer in self._informers())
        full = monotonic >= self._resync_at or lists != self._seen_lists
        if full:
            self._resync_at, self._seen_lists = monotonic + self.resync_s, lists
            self.kueue.resync()
        counts: dict[str, int] = {}
        self._sync_nodes(counts, now, full=full)
        counts.update(self.kueue.sync(now))
        self.budgets.refresh()
        for sources in self.group_objects.values():
            for source in sources:
                source.refresh()
        self.jobs.sync(counts, now, full=full)  # a finished Job's workload ends before its pods
        self.mirror.sync(counts, now, full=full)
        counts["pods_created"] = self.materializer.run_once()
        self.teller.quarantine(self.nodes.snapshot(), now)
        current = self.pods.snapshot()
        self._delete_cancelled(current, counts)
        protected = protected_uids(self.budgets.items.values(), current.values())
        return SideSync(protected=_pod_uids(protected), counts=counts)

    def _delete_cancelled(
        self, current: Mapping[str, dict[str, Any]], counts: dict[str, int]
    ) -> None:
        """A cancel deletes the pods: those of a cancelled workload that the cluster still runs
        and gpusched did not make (the ones it made go with their parent: kube.materialize) are
        deleted, gracefully, their uid as precondition; they hold what they hold until their
        DELETED arrives (kube.services.pod_gone)."""
        links = KubePod.objects.filter(
            pod__phase=Pod.Phase.TERMINATING, pod__workload__state=Workload.State.CANCELLED
        ).exclude(pod__workload__origin=Workload.Origin.SUBMITTED)
        for link in links:
            obj = current.get(f"{link.namespace}/{link.name}")
            if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
                continue
            status, message = self.api.delete_pod(link.namespace, link.name, link.uid)
            if status in (200, 404):
                counts["pods_deleted"] = counts.get("pods_deleted", 0) + 1
            else:
                logger.warning("deleting cancelled pod %s: %s %s", link, status, message)

    def _sync_nodes(self, counts: dict[str, int], now: datetime, *, full: bool) -> None:
        nrt_changed = self.nrt.refresh()
        slices_changed = self.claims.refresh()
        for warning in self.claims.warnings:
            self._warn_once(f"dra:{warning}", "%s", warning)
        changes: dict[str, Change] = self.nodes.drain()
        if full or nrt_changed or slices_changed:
            current = self.nodes.snapshot()
            changes.update({key: (obj, False) for key, obj in current.items()})
            known = Node.objects.filter(source=Node.Source.KUBERNETES, cordoned=False)
            for name in known.values_list("name", flat=True):
                if name not in current:
                    changes[name] = ({"metadata": {"name": name}}, True)
        applied: list[NodeSpec] = []
        for name, (obj, deleted) in sorted(changes.items()):
            if deleted:
                kube_services.node_gone(name=name)
                self._registered.pop(name, None)
                self._translated.pop(name, None)
                self.topology_warnings.forget(name)
                counts["nodes_gone"] = counts.get("nodes_gone", 0) + 1
                continue
            try:
                facts = self._node_facts(name, obj)
            except TranslationError as exc:
                self._warn_once(f"node:{name}:{exc}", "node %s not mirrored: %s", name, exc)
                continue
            for warning in facts.warnings:
                self._warn_once(f"node:{warning}", "%s", warning)
            self.topology_warnings.observe(obj, facts, now)
            if self._registered.get(name) != facts.spec:
                applied.append(facts.spec)
        if applied:
            kube_services.nodes_apply(specs=applied)
            self._registered.update((spec.name, spec) for spec in applied)
            counts["nodes_applied"] = counts.get("nodes_applied", 0) + len(applied)

    def _node_facts(self, name: str, obj: dict[str, Any]) -> NodeFacts:
        """The node as gpusched reads it; the last reading again while the object (its
        resourceVersion), its NRT zones and its DRA devices are those it was read from: a full
        pass over thousands of unchanged nodes translates none of them again."""
        inputs = (
            str((obj.get("metadata") or {}).get("resourceVersion") or ""),
            self.nrt.by_node.get(name),
            tuple(self.claims.devices(name)),
        )
        last = self._translated.get(name)
        if last is not None and inputs[0] and last[0] == inputs:
            return last[1]
        facts = node_spec(dra_node(obj, inputs[2]), nrt=inputs[1], annotation=self.annotation)
        self._translated[name] = (inputs, facts)
        return facts

    # --- 5. placeable ---------------------------------------------------------------------------

    def placeable(self, pods: Sequence[Pod]) -> list[Pod]:
        links = {
            pod_id: (f"{namespace}/{name}", uid)
            for pod_id, namespace, name, uid in KubePod.objects.filter(
                pod__in=list(pods), owned=True
            ).values_list("pod_id", "namespace", "name", "uid")
        }
        current = self.pods.snapshot()
        out = []
        for pod in pods:
            key, uid = links.get(pod.pk, ("", ""))
            obj = current.get(key)
            if obj is None:
                continue
            info = pod_info(obj, ask_read=False)  # its ask is in the database
            if info.uid == uid and info.pending_for(self.scheduler_name):
                out.append(pod)
        return out

    # --- 8. evict, 10. bind, 11. report ---------------------------------------------------------

    def evict(
        self,
        evictions: Sequence[PodEviction],
        now: datetime,
        said: dict[str, str] | None = None,
    ) -> dict[str, Verdict]:
        """Pods through the Eviction API; a Job's workload by suspending its Job (kube.jobs)."""
        said = {} if said is None else said
        jobs = self.jobs.job_workloads({e.pod.workload_id for e in evictions})
        verdicts = self.jobs.evict([e for e in evictions if e.pod.workload_id in jobs], said)
        rest = [e for e in evictions if e.pod.workload_id not in jobs]
        return {**verdicts, **evict(self.api, rest, now, said)}

    def cordon(self, node: str, cordoned: bool) -> NodeAnswer:
        return NodeAnswer(*self.api.set_unschedulable(node, cordoned))

    def bind(self, placed: Sequence[tuple[Pod, Decision]], now: datetime) -> Binding:
        return self.binder.bind(placed, now)

    def report(self, waiting: Sequence[Waiting], now: datetime) -> int:
        return self.teller.report(waiting, now)

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
