"""Making placements and evictions real on Kubernetes (the side's `evict` and `bind`, kube.side):

- evict: the Eviction API (policy/v1); a 429 (a disruption budget) refuses it; an accepted pod
  terminates for its grace period and holds what it holds until it is gone; a `Preempted` event
  says who and why.
- bind: a pod's ResourceClaims first get the chosen GPUs' devices and the pod as their consumer
  (kube.claims, as kube-scheduler's DynamicResources PreBind), then the Binding subresource with
  the chosen GPU ids as annotations, and a `Scheduled` event. A refused claim write or bind (409:
  bound or allocated elsewhere meanwhile; 404: deleted) goes back to the queue. Where a pod's
  claims hold other GPUs than the placement's (a claim allocated before), the claims are the
  truth: the allocation's GPU ids are moved to them. The pods of a chunk go out on the binder's
  threads while the cycle goes on (`InFlight`); their answers are taken, and written to the
  database, on the cycle's thread, in this cycle or the next (scheduling.worker.cycle).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kube.adopt import annotations_for
from kube.api import BindOutcome, KubeApi
from kube.bind_request import BIND_CONCURRENCY, BindRequest, send_binding
from kube.binding_process import BindingProcess
from kube.claims import ClaimBook, ReserveOutcome
from kube.leader import LeaseLost
from kube.models import KubePod
from kube.translate import ANNOTATION_GPU_IDS
from scheduling import services
from scheduling.core.scheduler import Decision
from scheduling.core.types import NodeSpec, Placement
from scheduling.models import Pod
from scheduling.worker.side import BindRefused, PodEviction, Verdict

logger = logging.getLogger(__name__)


def evict(
    api: KubeApi,
    evictions: Sequence[PodEviction],
    now: datetime,
    said: dict[str, str] | None = None,
) -> dict[str, Verdict]:
    """policy/v1 Eviction for each pod; in `said`, when given, the API server's answer per pod."""
    said = {} if said is None else said
    links = {kp.pod_id: kp for kp in KubePod.objects.filter(pod__in=[e.pod for e in evictions])}
    verdicts: dict[str, Verdict] = {}
    for eviction in evictions:
        link = links.get(eviction.pod.pk)
        if link is None:  # never reached the cluster: nothing runs, nothing to wait for
            verdicts[str(eviction.pod.uid)] = Verdict.GONE
            said[str(eviction.pod.uid)] = "not in the cluster"
            continue
        outcome = api.evict(namespace=link.namespace, name=link.name, uid=link.uid)
        said[str(eviction.pod.uid)] = f"{outcome.status} {outcome.message}".strip()
        if outcome.refused:
            verdicts[str(eviction.pod.uid)] = Verdict.REFUSED
            logger.info("eviction of %s refused: %s", link, outcome.message)
        elif outcome.accepted:
            verdicts[str(eviction.pod.uid)] = Verdict.TERMINATING
            api.event(
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
            logger.warning("eviction of %s failed: %s %s", link, outcome.status, outcome.message)
    return verdicts


class Binder:
    def __init__(
        self,
        api: KubeApi,
        claims: ClaimBook,
        *,
        identity: str,
        still_leading: Callable[[], bool],
        pods: Callable[[], Mapping[str, dict[str, Any]]],
        node_spec: Callable[[str], NodeSpec | None],
        process: BindingProcess | None = None,
    ) -> None:
        self.api = api
        self.process = process  # where the Bindings of pods without claims are sent from
        self.claims = claims
        self.identity = identity
        self.still_leading = still_leading
        self.pods = pods  # the informer's current pods by namespace/name
        self.node_spec = node_spec
        self._pool: ThreadPoolExecutor | None = None
        # The cluster uids of the pods whose Bindings are not answered yet: what the informer says
        # of them may predate their Binding (kube.pod_sync holds it back until answered).
        self.in_flight: set[str] = set()

    def bind(self, placed: Sequence[tuple[Pod, Decision]], now: datetime) -> InFlight:
        """Bindings (and their claims and `Scheduled` events) go out several at a time, on the
        binder's pool or from the binding process when there is one, as kube-scheduler's binding
        cycles run beside its scheduling cycle: the caller goes on meanwhile (the placements
        committed and assumed in its snapshot) and calls `wait()` for what the API server
        refused, handled there (the database is written from the caller's thread only). A pod
        with ResourceClaims is bound on the pool: its claims are written first, from the
        claims' book of this process."""
        links = {kp.pod_id: kp for kp in KubePod.objects.filter(pod__in=[p for p, _ in placed])}
        current = self.pods()
        held: dict[int, tuple[int, ...]] = {}  # pod pk -> GPUs its claims hold, where not chosen

        def request(
            link: KubePod, placement: Placement, annotations: dict[str, str]
        ) -> BindRequest:
            return BindRequest(
                namespace=link.namespace,
                name=link.name,
                uid=link.uid,
                node=placement.node,
                annotations=annotations,
                event=self.api.event_budget.take(),
                now=now,
            )

        def make_real(item: tuple[Pod, Decision]) -> BindOutcome | None:
            pod, decision = item
            if not self.still_leading():
                return None  # not ours to bind any more
            placement = decision.placement
            assert placement is not None
            link = links[pod.pk]
            annotations = annotations_for(placement)
            obj = current.get(f"{link.namespace}/{link.name}")
            spec = self.node_spec(placement.node)
            claimed = ReserveOutcome(True)
            if obj is not None and spec is not None:
                claimed = self.claims.reserve(obj, spec, placement.gpu_indices)
                if not claimed.ok:
                    return BindOutcome(False, claimed.status, claimed.message)
                if claimed.gpu_indices != tuple(sorted(placement.gpu_indices)):
                    held[pod.pk] = claimed.gpu_indices
                    annotations[ANNOTATION_GPU_IDS] = ",".join(map(str, claimed.gpu_indices))
            outcome = send_binding(self.api, request(link, placement, annotations))
            if not outcome.ok and claimed.written:
                self.claims.take_back(claimed.written, link.uid)
            return outcome

        def has_claims(pod: Pod) -> bool:
            obj = current.get(f"{links[pod.pk].namespace}/{links[pod.pk].name}") or {}
            return bool((obj.get("spec") or {}).get("resourceClaims"))

        sent: dict[int, Future[BindOutcome | None]] = {}
        if self.process is not None:
            plain = [(pod, d) for pod, d in placed if not has_claims(pod)]
            if plain and self.still_leading():
                requests = []
                for pod, decision in plain:
                    assert decision.placement is not None
                    placement = decision.placement
                    requests.append(request(links[pod.pk], placement, annotations_for(placement)))
                answers = self.process.submit(requests)
                sent = {pod.pk: answer for (pod, _), answer in zip(plain, answers, strict=True)}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(BIND_CONCURRENCY, thread_name_prefix="binder")
        pool = self._pool
        futures = [sent.get(item[0].pk) or pool.submit(make_real, item) for item in placed]
        self.in_flight.update(link.uid for link in links.values())
        return InFlight(self, list(placed), futures, links, held, now)

    def answered(
        self,
        placed: Sequence[tuple[Pod, Decision]],
        outcomes: Sequence[BindOutcome | None],
        links: Mapping[int, KubePod],
        held: Mapping[int, tuple[int, ...]],
        now: datetime,
    ) -> list[BindRefused]:
        """What the API server answered, into the database: the refused pods back to the queue,
        the GPUs of claims that hold others than chosen recorded; LeaseLost when leadership was
        lost before some were sent."""
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
            services.pod_requeue(pod=pod, reason=reason, now=now)
            refused.append(BindRefused(pod, reason, conflict=outcome.conflict))
        # After the refused ones gave their GPUs back: what the claims hold is the truth.
        bound = {pod.pk: pod for (pod, _), o in zip(placed, outcomes, strict=True) if o and o.ok}
        observed = {bound[pk]: gpus for pk, gpus in held.items() if pk in bound}
        if observed:
            result = services.gpus_observe(observed=observed, source="claims")
            for uid, why in result.refused.items():
                logger.warning("pod %s: the GPUs of its claims not recorded: %s", uid, why)
        if lost:
            for pod in lost:
                services.pod_requeue(pod=pod, reason="lease lost", now=now)
            raise LeaseLost(f"{self.identity} stopped leading before binding {lost[0].name}")
        return refused


@dataclass
class InFlight:
    """Bindings on the binder's pool (kube.side's `bind`)."""

    binder: Binder
    placed: list[tuple[Pod, Decision]]
    futures: list[Future[BindOutcome | None]]
    links: dict[int, KubePod]
    held: dict[int, tuple[int, ...]]  # filled in by the pool's threads
    now: datetime

    def done(self) -> bool:
        return all(future.done() for future in self.futures)

    def wait(self) -> list[BindRefused]:
        outcomes = [_outcome(future) for future in self.futures]
        try:
            return self.binder.answered(self.placed, outcomes, self.links, self.held, self.now)
        finally:
            self.binder.in_flight.difference_update(link.uid for link in self.links.values())


def _outcome(future: Future[BindOutcome | None]) -> BindOutcome | None:
    """A Binding that could not be sent (the connection dropped, the binding process died) is
    refused: its pod goes back to the queue. Had the API server taken it after all, the pod is
    seen bound next and counted where it runs."""
    try:
        return future.result()
    except Exception as exc:
        logger.warning("a Binding could not be sent: %r", exc)
        return BindOutcome(False, 0, f"not sent: {exc!r}")
