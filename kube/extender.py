"""gpusched as a kube-scheduler extender (extender v1, reference/wire-formats.md §3): the default
scheduler keeps scheduling and asks us, over HTTP, which nodes fit a pod, how good each is, and
(optionally) to bind it; we answer with the same core and profile the secondary scheduler uses.

Wire rules: the structs have no JSON tags, so fields are Go's PascalCase; nil is `null`.
- filter: `ExtenderArgs {Pod, Nodes, NodeNames}` -> `ExtenderFilterResult {Nodes, NodeNames,
  FailedNodes, FailedAndUnresolvableNodes, Error}`. With `nodeCacheCapable: true` only NodeNames
  come and go (a subset of the request); otherwise full Nodes come and the passing Node objects go
  back. Nodes that fail for a reason preemption cannot fix are FailedAndUnresolvable.
- prioritize: the same args -> `[{"Host", "Score"}]`, scores 0..10 (kube-scheduler multiplies by
  the extender's weight and by 10). The best node gets 10, the others in proportion.
- bind: `ExtenderBindingArgs {PodName, PodNamespace, PodUID, Node}` -> `{"Error"}`; we pick the GPU
  ids on that node, record the placement and create the Binding with them as annotations.
Bad input never becomes a 500: filter and bind answer 200 with the reason in `Error` (what
kube-scheduler reads), prioritize (whose reply is a bare list) answers 400 with `{"Error"}`.

Cluster state comes from the database mirror kept by `runkube` (ClusterCache, fed by the outbox),
so answering costs a few vectorized array operations whatever the cluster size.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np
import numpy.typing as npt
from django.conf import settings
from django.utils import timezone

from kube import metrics as extender_metrics
from kube import services as kube_services
from kube.adopt import annotations_for
from kube.api import EventBudget, KubeApi, connect
from kube.models import KubePod
from kube.side import topology_annotation
from kube.translate import TranslationError, node_spec, pod_info
from scheduling import profile_files, services
from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import NormalizeScorePlugin
from scheduling.core.scheduler import Framework
from scheduling.core.snapshot import ClusterSnapshot, OverCommitError
from scheduling.core.status import Code
from scheduling.core.types import NodeSpec, PodRequest
from scheduling.models import Pod
from scheduling.worker import cluster_state
from scheduling.worker.cache import ClusterCache
from scheduling.worker.load_feed import LoadFeed

logger = logging.getLogger(__name__)

MAX_EXTENDER_PRIORITY = 10


class ExtenderError(ValueError):
    """Input the extender cannot use; the message goes back in the `Error` field."""


@dataclass
class Verdict:
    passed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    scores: list[int] = field(default_factory=list)  # aligned with the names asked about


UNKNOWN_NODE = "node is not known to gpusched yet"


def evaluate(
    framework: Framework,
    pod: PodRequest,
    snapshot: ClusterSnapshot,
    names: Sequence[str],
    *,
    score: bool,
    rows: npt.NDArray[np.int64] | None = None,
) -> Verdict:
    """Filter (and optionally score) `names` for `pod` without reserving anything: PreFilter and
    Filter over the whole snapshot (vectorized), then PreScore / Score / NormalizeScore over the
    requested nodes that pass. Everything per node is array work; Python touches each name once,
    to look it up, and once more to write the reply."""
    verdict = Verdict()
    asked = np.array(names, dtype=object)
    if rows is None:
        rows = node_rows(snapshot, names)
    known = rows >= 0
    if not known.all():
        verdict.failed = dict.fromkeys(asked[~known].tolist(), UNKNOWN_NODE)
    state = CycleState()
    for plugin_name, pre in framework.pre_filter:
        status = pre.pre_filter(state, pod, snapshot)
        if status.code is Code.SKIP:
            state.skipped.add(plugin_name)
        elif not status.is_success:
            message = status.message() or f"{plugin_name}: {status.code.value}"
            everyone = dict.fromkeys(asked[known].tolist(), message)
            if status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                verdict.unresolvable = everyone
            else:
                verdict.failed.update(everyone)
            verdict.scores = [0] * len(names)
            return verdict
    filters = [
        plugin.filter(state, pod, snapshot)
        for plugin_name, plugin in framework.filter
        if plugin_name not in state.skipped
    ]
    # The first failing filter of each asked node, as an index into all filters' reasons.
    at = rows[known]
    first = np.full(len(at), -1, dtype=np.int64)
    reasons: list[str] = []
    unresolvable: list[bool] = []
    for verdicts in filters:
        codes = verdicts.codes[at].astype(np.int64)
        hit = (codes != 0) & (first < 0)
        first[hit] = len(reasons) + codes[hit] - 1
        reasons += verdicts.reasons
        unresolvable += verdicts.unresolvable
    ok = first < 0
    known_names = asked[known]
    verdict.passed = known_names[ok].tolist()
    if not ok.all():
        failing = first[~ok]
        reason_of = np.array(reasons, dtype=object)[failing]
        hard = np.array(unresolvable, dtype=np.bool_)[failing]
        failing_names = known_names[~ok]
        verdict.failed.update(
            zip(failing_names[~hard].tolist(), reason_of[~hard].tolist(), strict=True)
        )
        verdict.unresolvable = dict(
            zip(failing_names[hard].tolist(), reason_of[hard].tolist(), strict=True)
        )
    if not score:
        return verdict
    candidates = at[ok]
    totals = np.zeros(len(candidates))
    if len(candidates):
        for plugin_name, pre_scorer in framework.pre_score:
            status = pre_scorer.pre_score(state, pod, snapshot, candidates)
            if status.code is Code.SKIP:
                state.skipped.add(plugin_name)
        for plugin_name, scorer, weight in framework.score:
            if plugin_name in state.skipped:
                continue
            raw = scorer.score(state, pod, snapshot, candidates)
            if isinstance(scorer, NormalizeScorePlugin):
                raw = scorer.normalize_score(state, pod, raw)
            totals += weight * raw
    best = float(totals.max()) if len(totals) else 0.0
    scores = np.zeros(len(names), dtype=np.int64)
    if best > 0:
        positions = np.flatnonzero(known)[ok]
        scores[positions] = np.rint(MAX_EXTENDER_PRIORITY * totals / best)
    verdict.scores = scores.tolist()
    return verdict


def node_rows(snapshot: ClusterSnapshot, names: Sequence[str]) -> npt.NDArray[np.int64]:
    """Each name's row in the snapshot, -1 when unknown."""
    return np.fromiter(map(snapshot.index.get, names, repeat(-1)), np.int64, len(names))


# --- request handling ---------------------------------------------------------------------------


@dataclass
class ParsedArgs:
    pod: PodRequest
    pod_doc: Mapping[str, Any]
    names: list[str]
    node_docs: list[Mapping[str, Any]] | None  # nodeCacheCapable: false


def parse_args(doc: object) -> ParsedArgs:
    if not isinstance(doc, dict):
        raise ExtenderError("ExtenderArgs must be a JSON object")
    pod_doc = doc.get("Pod")
    if not isinstance(pod_doc, dict) or not isinstance(pod_doc.get("metadata"), dict):
        raise ExtenderError("ExtenderArgs.Pod must be a v1.Pod object")
    try:
        info = pod_info(pod_doc)
        if info.ask is None:
            raise ExtenderError(f"pod {info.key}: {info.error}")
        pod = info.request()
    except (AttributeError, TypeError, KeyError) as exc:
        # A field of the wrong shape (`containers: "x"`, a null container) is the caller's
        # malformed Pod, answered as such: not "extender unavailable", a 503 that counts against
        # the extender's availability alert.
        raise ExtenderError(f"ExtenderArgs.Pod is not a valid v1.Pod ({exc})") from None
    nodes = doc.get("Nodes")
    names_doc = doc.get("NodeNames")
    if nodes is not None:
        if not isinstance(nodes, dict) or not isinstance(nodes.get("items"), list):
            raise ExtenderError("ExtenderArgs.Nodes must be a v1.NodeList")
        items = nodes["items"]
        names = []
        for item in items:
            name = (item.get("metadata") or {}).get("name") if isinstance(item, dict) else None
            if not isinstance(name, str) or not name:
                raise ExtenderError("every node in ExtenderArgs.Nodes needs metadata.name")
            names.append(name)
        return ParsedArgs(pod, pod_doc, names, items)
    if names_doc is None:
        raise ExtenderError("ExtenderArgs needs Nodes or NodeNames")
    if not isinstance(names_doc, list) or not set(map(type, names_doc)) <= {str}:
        raise ExtenderError("ExtenderArgs.NodeNames must be a list of strings")
    return ParsedArgs(pod, pod_doc, list(names_doc), None)


class Extender:
    """The extender's state: a profile's framework, the outbox-fed cluster cache and, for bind,
    an API client. One lock: requests are answered one at a time, each in a few milliseconds."""

    def __init__(
        self, framework: Framework, *, api: KubeApi | None = None, identity: str = "extender"
    ) -> None:
        self.framework = framework
        self.cache = ClusterCache()
        self.load_feed = LoadFeed()
        self.api = api
        self.identity = identity
        self.annotation = topology_annotation(framework)
        self.lock = threading.Lock()
        # kube-scheduler sends the same NodeNames call after call: their rows are looked up once
        # per snapshot (comparing two equal lists is far cheaper than 5,000 dict lookups).
        self._last_rows: tuple[ClusterSnapshot, list[str], npt.NDArray[np.int64]] | None = None

    def _rows(self, snapshot: ClusterSnapshot, names: list[str]) -> npt.NDArray[np.int64]:
        last = self._last_rows
        if last is not None and last[0] is snapshot and last[1] == names:
            return last[2]
        rows = node_rows(snapshot, names)
        self._last_rows = (snapshot, names, rows)
        return rows

    def cluster(self) -> cluster_state.ClusterState:
        """The cache's state. After a rebuild, the new snapshot's tens of thousands of long-lived
        objects (and everything else alive) are frozen out of the cyclic collector's way, so a
        full collection never walks them in the middle of a request (the p99 on kube-scheduler's
        critical path); the previous generation is collected first, so nothing leaks."""
        rebuilds = self.cache.rebuilds
        cluster = self.cache.state()
        if self.cache.rebuilds != rebuilds:
            gc.unfreeze()
            gc.collect()
            gc.freeze()
        # The same DCGM feed as the scheduler's (refreshed at most every few seconds).
        self.load_feed.refresh(cluster, timezone.now())
        return cluster

    def _evaluate(self, args: ParsedArgs, *, score: bool) -> Verdict:
        with self.lock:
            snapshot = self._snapshot(args)
            return evaluate(
                self.framework,
                self.load_feed.estimate(args.pod),
                snapshot,
                args.names,
                score=score,
                rows=self._rows(snapshot, args.names),
            )

    def filter(self, doc: object) -> dict[str, Any]:
        try:
            args = parse_args(doc)
            verdict = self._evaluate(args, score=False)
        except (ExtenderError, TranslationError) as exc:
            return filter_result(error=str(exc))
        if args.node_docs is not None:
            passed = set(verdict.passed)
            items = [
                n for n, name in zip(args.node_docs, args.names, strict=True) if name in passed
            ]
            return filter_result(
                nodes=items, failed=verdict.failed, unresolvable=verdict.unresolvable
            )
        return filter_result(
            names=verdict.passed, failed=verdict.failed, unresolvable=verdict.unresolvable
        )

    def prioritize(self, doc: object) -> list[dict[str, Any]]:
        args = parse_args(doc)  # ExtenderError goes to the caller (400)
        verdict = self._evaluate(args, score=True)
        return [
            {"Host": name, "Score": value}
            for name, value in zip(args.names, verdict.scores, strict=True)
        ]

    def bind(self, doc: object) -> dict[str, str]:
        try:
            return {"Error": self._bind(doc)}
        except (ExtenderError, TranslationError) as exc:
            return {"Error": str(exc)}

    def _bind(self, doc: object) -> str:
        if not isinstance(doc, dict):
            raise ExtenderError("ExtenderBindingArgs must be a JSON object")
        fields = {key: doc.get(key) for key in ("PodName", "PodNamespace", "PodUID", "Node")}
        missing = [key for key, value in fields.items() if not isinstance(value, str) or not value]
        if missing:
            raise ExtenderError(f"ExtenderBindingArgs needs {', '.join(missing)}")
        name, namespace = str(fields["PodName"]), str(fields["PodNamespace"])
        uid, node = str(fields["PodUID"]), str(fields["Node"])
        if self.api is None:
            raise ExtenderError("this extender has no Kubernetes API access to bind with")
        now = timezone.now()
        with self.lock:
            cluster = self.cluster()
            if node not in cluster.snapshot.index:
                raise ExtenderError(f"node {node} is not known to gpusched yet")
            kube_pod = KubePod.objects.filter(uid=uid).select_related(
                "pod__workload__tenant", "pod__constraints"
            )
            mirrored = kube_pod.first()
            if mirrored is None:
                pod_doc = self.api.read_pod(namespace, name)
                if pod_doc is None:
                    raise ExtenderError(f"pod {namespace}/{name} not found")
                info = pod_info(pod_doc)
                if info.uid != uid:
                    raise ExtenderError(f"pod {namespace}/{name} is not uid {uid}")
                if info.ask is None:
                    raise ExtenderError(info.error)
                pod = kube_services.workload_mirror_admitted(info=info)
            else:
                pod = mirrored.pod
            if pod.phase != Pod.Phase.PENDING:
                raise ExtenderError(f"pod {namespace}/{name} is already {pod.phase}")
            request = cluster_state.pod_request(pod)
            one = _one_node_snapshot(cluster, node)
            decision = self.framework.schedule_one(request, one)
            if decision.placement is None:
                raise ExtenderError(
                    f"pod {namespace}/{name} does not fit on {node}: " + (decision.summary())
                )
            sub = cluster_state.ClusterState(one, cluster.node_ids, cluster.gpu_ids, {})
            result = services.placements_commit(
                cluster=sub, placed=[(pod, decision)], scheduler=self.identity, now=now
            )
            if result.conflicts:
                raise ExtenderError(f"pod {namespace}/{name}: {result.conflicts[0][1]}")
            outcome = self.api.bind(
                namespace=namespace,
                name=name,
                uid=uid,
                node=node,
                annotations=annotations_for(decision.placement),
            )
            if not outcome.ok:
                services.pod_requeue(pod=pod, reason=outcome.message, now=now)
                return outcome.message or f"binding refused ({outcome.status})"
        return ""

    def _snapshot(self, args: ParsedArgs) -> ClusterSnapshot:
        cluster = self.cluster()
        if args.node_docs is None:
            return cluster.snapshot
        # nodeCacheCapable: false: the request carries the nodes; use what we know of each (our
        # mirror has the topology and what is held), else what the Node object says.
        specs: list[NodeSpec] = []
        for name, node_doc in zip(args.names, args.node_docs, strict=True):
            i = cluster.snapshot.index.get(name)
            if i is not None:
                specs.append(cluster.snapshot.nodes[i])
            else:
                specs.append(node_spec(node_doc, annotation=self.annotation).spec)
        snapshot = ClusterSnapshot(specs)
        for request, placement in cluster.held.values():
            if placement.node in snapshot.index:
                try:
                    snapshot.assume(request, placement)
                except (OverCommitError, ValueError, IndexError):
                    logger.warning("held placement of %s does not fit %s", request.uid, placement)
        return snapshot


def _one_node_snapshot(cluster: cluster_state.ClusterState, node: str) -> ClusterSnapshot:
    spec = cluster.snapshot.nodes[cluster.snapshot.index[node]]
    one = ClusterSnapshot([spec])
    for request, placement in cluster.held.values():
        if placement.node == node:
            one.assume(request, placement)
    return one


def filter_result(
    *,
    names: list[str] | None = None,
    nodes: list[Mapping[str, Any]] | None = None,
    failed: Mapping[str, str] | None = None,
    unresolvable: Mapping[str, str] | None = None,
    error: str = "",
) -> dict[str, Any]:
    return {
        "Nodes": {"metadata": {}, "items": list(nodes)} if nodes is not None else None,
        "NodeNames": names,
        "FailedNodes": dict(failed or {}),
        "FailedAndUnresolvableNodes": dict(unresolvable or {}),
        "Error": error,
    }


# --- the process-wide extender ------------------------------------------------------------------

_extender: Extender | None = None
_failure: str = ""
_extender_lock = threading.Lock()


class ExtenderUnavailable(RuntimeError):
    """The process's extender could not be built (a bad profile, no API access): every call
    answers 503 with this message, and /readyz fails with it."""


def _build() -> Extender:
    """From the environment: GPUSCHED_PROFILE (name or path; default the shipped `gpusched`, else
    `topology`) and GPUSCHED_EXTENDER_BIND=1 to bind through the Kubernetes API (in-cluster or
    KUBECONFIG)."""
    name = os.environ.get("GPUSCHED_PROFILE") or (
        "gpusched" if "gpusched" in profile_files.available() else "topology"
    )
    framework = Framework(profile_files.load_profile(name))
    api = None
    if os.environ.get("GPUSCHED_EXTENDER_BIND", "").lower() in ("1", "true", "yes"):
        identity = os.environ.get("POD_NAME") or "gpusched-extender"
        api = KubeApi(
            connect(kubeconfig=os.environ.get("KUBECONFIG") or None),
            reporting_instance=identity,
            event_budget=EventBudget(
                settings.KUBE_EVENTS_PER_S,
                settings.KUBE_EVENT_BURST,
                on_drop=extender_metrics.events_dropped.inc,
            ),
        )
    return Extender(framework, api=api)


def load() -> str:
    """Build the process's extender now (at start, not at kube-scheduler's first call); returns
    "" or why it could not be built, which every later call and /readyz then report."""
    global _extender, _failure
    with _extender_lock:
        if _extender is None and not _failure:
            try:
                _extender = _build()
            except Exception as exc:  # a bad profile, an unreachable API: report, never crash
                _failure = f"extender unavailable: {type(exc).__name__}: {exc}"
                logger.error("%s", _failure)
        return _failure


def get() -> Extender:
    """The process's extender; ExtenderUnavailable when it could not be built."""
    failure = load()
    if failure or _extender is None:
        raise ExtenderUnavailable(failure or "extender unavailable")
    return _extender


def install(extender: Extender | None) -> None:
    """Replace the process-wide extender (tests, benchmarks); None: build it again on next use."""
    global _extender, _failure
    with _extender_lock:
        _extender, _failure = extender, ""
