"""One scheduling attempt for one pod, as numbered phases, and the binding that follows it.

`Framework.schedule_one` is the scheduling cycle (PreFilter .. Permit) and changes nothing outside
the snapshot it is given: on success the placement is assumed into it, so the next pod sees it at
once. `Framework.bind` is the binding cycle; if a binder fails, the placement is unreserved and
forgotten.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from scheduling.core.cycle_state import CycleState
from scheduling.core.framework import (
    EXTENSION_POINTS,
    AllocationDraft,
    BindPlugin,
    CodeArray,
    FilterPlugin,
    FloatArray,
    IntArray,
    NodeVerdicts,
    NormalizeScorePlugin,
    PermitPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
    UnreservePlugin,
    UsesProfileFilters,
)
from scheduling.core.plugin_args import ProfileError
from scheduling.core.profiles import Profile
from scheduling.core.registry import REGISTRY, PluginFactory
from scheduling.core.snapshot import ClusterSnapshot, OverCommitError
from scheduling.core.status import Code, Status
from scheduling.core.types import Placement, PodRequest, TopologyScope

_EMPTY_INT: IntArray = np.zeros(0, dtype=np.int64)
_EMPTY_FLOAT: FloatArray = np.zeros(0, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class ScoreRecord:
    plugin: str
    weight: int
    scores: FloatArray  # normalized 0..100, aligned with Decision.candidates


@dataclass
class Decision:
    """The outcome of one attempt and everything needed to explain it."""

    pod: PodRequest
    status: Status
    node_names: Sequence[str]
    state: CycleState
    placement: Placement | None = None
    filters: tuple[tuple[str, NodeVerdicts], ...] = ()
    candidates: IntArray = field(default_factory=lambda: _EMPTY_INT)
    scores: tuple[ScoreRecord, ...] = ()
    totals: FloatArray = field(default_factory=lambda: _EMPTY_FLOAT)
    feasible_nodes: int = 0
    nomination: PostFilterResult | None = None
    # Where the chosen node is in node_names (every placed pod's record explains it: looking a
    # name up among thousands, pod after pod, was a visible part of the commit).
    chosen_row: int | None = None
    # Every node's first failing reason, when nothing fit (PostFilter's input, kept for summary)
    combined: NodeVerdicts | None = None

    @property
    def node(self) -> str | None:
        return self.placement.node if self.placement else None

    def summary(self) -> str:
        """kube-scheduler's FailedScheduling message: each node counted once, under its first
        failing reason."""
        if self.placement is not None:
            return f"assigned to {self.placement.node}"
        if not self.filters:
            return self.status.message()
        combined = self.combined
        if combined is None:
            combined = _combine(self.filters, len(self.node_names))
        counts: dict[str, int] = {}
        for code, n in enumerate(
            np.bincount(combined.codes, minlength=len(combined.reasons) + 1)[1:], start=1
        ):
            if n:
                reason = combined.reasons[code - 1]
                counts[reason] = counts.get(reason, 0) + int(n)
        parts = ", ".join(
            f"{n} {reason}" for reason, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        )
        head = f"{self.feasible_nodes}/{len(self.node_names)} nodes are available"
        return f"{head}: {parts}." if parts else f"{head}. {self.status.message()}".rstrip()

    def explain(self, node: str) -> dict[str, Any]:
        """Per plugin: the filter status of `node`, and its score if it was scored."""
        row = self.chosen_row
        i = row if row is not None and self.node_names[row] == node else self.node_names.index(node)
        filters = []
        for plugin, verdicts in self.filters:
            status = verdicts.status(i, plugin)
            filters.append(
                {"plugin": plugin, "code": status.code.value, "reason": status.message()}
            )
        scored = np.flatnonzero(self.candidates == i)
        scores: dict[str, float] = {}
        total = None
        if len(scored):
            j = int(scored[0])
            scores = {r.plugin: round(float(r.scores[j]), 3) for r in self.scores}
            total = round(float(self.totals[j]), 3)
        notes = {plugin: text for plugin, fn in self.state.notes.items() if (text := fn(i))}
        return {
            "node": node,
            "chosen": node == self.node,
            "filters": filters,
            "scores": scores,
            "total": total,
            "notes": notes,
        }


class Framework:
    """A profile's plugins, instantiated once, grouped by extension point in the profile's order."""

    def __init__(self, profile: Profile, registry: Mapping[str, PluginFactory] = REGISTRY) -> None:
        self.profile = profile
        instances: dict[str, object] = {}
        for point in EXTENSION_POINTS:
            for spec in profile.enabled(point):
                if spec.name not in instances:
                    instances[spec.name] = registry[spec.name](profile.plugin_args.get(spec.name))
                if not isinstance(instances[spec.name], EXTENSION_POINTS[point]):
                    raise ProfileError(
                        f"profile {profile.scheduler_name}: "
                        f"plugin {spec.name} does not implement {point}"
                    )

        def at(point: str) -> list[tuple[str, Any]]:
            return [(spec.name, instances[spec.name]) for spec in profile.enabled(point)]

        queue_sort = at("queueSort")
        self.queue_sort: QueueSortPlugin | None = queue_sort[0][1] if queue_sort else None
        self.pre_filter: list[tuple[str, PreFilterPlugin]] = at("preFilter")
        self.filter: list[tuple[str, FilterPlugin]] = at("filter")
        self.post_filter: list[tuple[str, PostFilterPlugin]] = at("postFilter")
        self.pre_score: list[tuple[str, PreScorePlugin]] = at("preScore")
        self.score: list[tuple[str, ScorePlugin, int]] = [
            (spec.name, cast(ScorePlugin, instances[spec.name]), spec.weight)
            for spec in profile.enabled("score")
        ]
        # Protocol checks are slow (typing inspects the class each time): done once, here.
        self._normalizers: dict[str, NormalizeScorePlugin] = {
            name: plugin
            for name, plugin, _ in self.score
            if isinstance(plugin, NormalizeScorePlugin)
        }
        self.reserve: list[tuple[str, ReservePlugin]] = at("reserve")
        self.permit: list[tuple[str, PermitPlugin]] = at("permit")
        self.bind_plugins: list[tuple[str, BindPlugin]] = at("bind")
        self._unreservers: list[UnreservePlugin] = [
            plugin for _, plugin in reversed(self.reserve) if isinstance(plugin, UnreservePlugin)
        ]
        for _, plugin in self.post_filter:
            if isinstance(plugin, UsesProfileFilters):
                plugin.use_filters(self.filter)
        self._next_start = 0

    def filter_nodes(self, pod: PodRequest, snapshot: ClusterSnapshot) -> tuple[Decision, IntArray]:
        """PreFilter and Filter only (phases 1-2): the attempt's decision so far (a PreFilter
        rejection, else success with its filters) and the feasible nodes. Changes nothing."""
        state = CycleState()
        names = snapshot.names

        # 1. PreFilter: per-pod work once; a rejection here fails the pod on every node.
        for name, plugin in self.pre_filter:
            status = plugin.pre_filter(state, pod, snapshot)
            if status.code is Code.SKIP:
                state.skipped.add(name)
            elif not status.is_success:
                return Decision(pod, status, names, state), _EMPTY_INT

        # 2. Filter: every plugin answers for every node; a node is feasible when all pass.
        filters = tuple(
            (name, plugin.filter(state, pod, snapshot))
            for name, plugin in self.filter
            if name not in state.skipped
        )
        feasible_idx = np.flatnonzero(_failing_codes(filters, len(snapshot)) == 0)
        decision = Decision(
            pod, Status.success(), names, state, filters=filters, feasible_nodes=len(feasible_idx)
        )
        return decision, feasible_idx

    def schedule_one(self, pod: PodRequest, snapshot: ClusterSnapshot) -> Decision:
        names = snapshot.names
        filtered, feasible_idx = self.filter_nodes(pod, snapshot)
        if not filtered.status.is_success:
            return filtered
        state, filters = filtered.state, filtered.filters

        # 3. PostFilter: nothing fits; ask preemption for a node where evicting victims would help.
        if len(feasible_idx) == 0:
            verdicts_all = _combine(filters, len(snapshot))
            nomination = None
            for _, post in self.post_filter:
                nomination = post.post_filter(state, pod, snapshot, verdicts_all)
                if nomination is not None:
                    break
            unresolvable = all(
                verdicts_all.unresolvable[c - 1] for c in verdicts_all.codes.tolist() if c
            )
            code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
            decision = Decision(
                pod,
                Status.of(code, plugin="Filter"),
                names,
                state,
                filters=filters,
                nomination=nomination,
                combined=verdicts_all,
            )
            reason = decision.summary()
            decision.status = Status.of(code, reason, plugin="Filter")
            return decision

        # 4. Choose which feasible nodes to score (all of them unless the profile samples).
        candidates = self._sample(feasible_idx, len(snapshot))

        # 5. PreScore, Score, NormalizeScore: weighted sum of 0..100 scores per candidate.
        for name, pre_scorer in self.pre_score:
            status = pre_scorer.pre_score(state, pod, snapshot, candidates)
            if status.code is Code.SKIP:
                state.skipped.add(name)
            elif not status.is_success:
                return Decision(
                    pod, status, names, state, filters=filters, feasible_nodes=len(feasible_idx)
                )
        records = []
        totals = np.zeros(len(candidates))
        for name, scorer, weight in self.score:
            if name in state.skipped:
                continue
            raw = scorer.score(state, pod, snapshot, candidates)
            normalizer = self._normalizers.get(name)
            normalized = raw if normalizer is None else normalizer.normalize_score(state, pod, raw)
            records.append(ScoreRecord(name, weight, normalized))
            totals += normalized if weight == 1 else weight * normalized

        # 6. Select: highest total; ties go to the node first in the snapshot's tie order.
        best = np.flatnonzero(totals == totals.max())
        chosen = int(candidates[best[np.argmin(snapshot.tie_rank[candidates[best]])]])
        decision = Decision(
            pod,
            Status.success(),
            names,
            state,
            filters=filters,
            candidates=candidates,
            scores=tuple(records),
            totals=totals,
            feasible_nodes=len(feasible_idx),
        )

        # 7. Reserve: plugins settle the GPUs and CPU on the chosen node; then the snapshot assumes
        # it.
        draft = AllocationDraft(node=chosen)
        for _, reserver in self.reserve:
            status = reserver.reserve(state, pod, snapshot, draft)
            if not status.is_success:
                decision.status = status
                return decision
        placement = Placement(
            node=names[chosen],
            gpu_indices=draft.gpu_indices or (),
            milli_per_gpu=draft.milli_per_gpu,
            mig_slots=draft.mig_slots or (),
            numa_cpu_milli=draft.numa_cpu_milli or (),
            scope=TopologyScope(draft.scope) if draft.scope else None,
            reclaimed=draft.reclaimed,
        )
        try:
            snapshot.assume(pod, placement)
        except OverCommitError as exc:
            self._unreserve(state, pod, placement)
            decision.status = Status.of(Code.UNSCHEDULABLE, str(exc), plugin="Reserve")
            return decision
        decision.placement, decision.chosen_row = placement, chosen

        # 8. Permit: a plugin may hold the pod (a gang still gathering) or reject it.
        for _, permitter in self.permit:
            status = permitter.permit(state, pod, placement)
            if status.code is Code.WAIT:
                decision.status = status
            elif not status.is_success:
                self.forget(decision, snapshot)
                decision.status = status
                return decision
        return decision

    def bind(self, decision: Decision, snapshot: ClusterSnapshot) -> Status:
        """The binding cycle: the first binder that does not skip decides. On failure the
        reservation is released (the seeds' Unreserve), so the GPUs are free for the next attempt.
        """
        assert decision.placement is not None, "bind needs a reserved placement"
        for name, binder in self.bind_plugins:
            status = binder.bind(decision.state, decision.pod, decision.placement)
            if status.code is Code.SKIP:
                continue
            if not status.is_success:
                self.forget(decision, snapshot)
            return Status(status.code, status.reasons, status.plugin or name)
        return Status.of(Code.ERROR, "no bind plugin accepted the pod", plugin="Bind")

    def forget(self, decision: Decision, snapshot: ClusterSnapshot) -> None:
        """Undo a reservation: Unreserve plugins in reverse, then drop it from the snapshot."""
        if decision.placement is None:
            return
        self._unreserve(decision.state, decision.pod, decision.placement)
        snapshot.forget(decision.pod, decision.placement)
        decision.placement = None

    def _unreserve(self, state: CycleState, pod: PodRequest, placement: Placement) -> None:
        for plugin in self._unreservers:
            plugin.unreserve(state, pod, placement)

    def _sample(self, feasible: IntArray, cluster_size: int) -> IntArray:
        """kube-scheduler's percentageOfNodesToScore, starting where the previous cycle stopped."""
        percentage = self.profile.percentage_of_nodes_to_score
        if percentage >= 100 or cluster_size < 100:
            return feasible
        if percentage == 0:
            percentage = max(5, 50 - cluster_size // 125)
        wanted = max(100, cluster_size * percentage // 100)
        if len(feasible) <= wanted:
            return feasible
        start = self._next_start % len(feasible)
        self._next_start = start + wanted
        return np.roll(feasible, -start)[:wanted]


def _failing_codes(filters: tuple[tuple[str, NodeVerdicts], ...], size: int) -> CodeArray:
    """Per node: nonzero when some filter failed it (the codes OR-ed: one pass per filter)."""
    if not filters:
        return np.zeros(size, dtype=np.uint8)
    codes = filters[0][1].codes
    for _, verdicts in filters[1:]:
        if verdicts.failing:
            codes = codes | verdicts.codes
    return codes


def _combine(filters: tuple[tuple[str, NodeVerdicts], ...], size: int) -> NodeVerdicts:
    """One verdict per node: its first failing plugin's reason (used by PostFilter). Per filter,
    not per reason: a pod that fits nowhere was combined twice (PostFilter, then its message), and
    a pass per reason of every filter was a fifth of an over-request run's CPU."""
    codes = np.zeros(size, dtype=np.uint8)
    reasons: list[str] = []
    unresolvable: list[bool] = []
    for _, verdicts in filters:
        if not verdicts.failing:
            continue
        hit = (verdicts.codes != 0) & (codes == 0)
        if not hit.any():
            continue
        failed = verdicts.codes[hit]
        renumber = np.zeros(len(verdicts.reasons) + 1, dtype=np.uint8)
        for code in np.unique(failed).tolist():
            reasons.append(verdicts.reasons[code - 1])
            unresolvable.append(verdicts.unresolvable[code - 1])
            renumber[code] = len(reasons)
        codes[hit] = renumber[failed]
    return NodeVerdicts(codes, tuple(reasons), tuple(unresolvable))
