"""Run times predicted online from finished work only (issue 18): nothing here ever sees how long
a pending or running job will really take.

Each finished job is filed under a hierarchy of ever broader groups of similar jobs: the same
tenant, name pattern (the name without its trailing counter or hash), labels and pod-set shape;
then the same tenant and name pattern; tenant and shape; tenant and GPU count; the shape; the GPU
count; everything. A prediction comes from the most specific group with enough samples, as
quantiles (p50, p90) of its most recent durations, and says which group it came from ("p50 of 37
similar jobs (tenant vision, name train-resnet)"). The quantiles are weighted by how recently
each job finished (its weight halves every `HALF_LIFE_S` before the group's newest): work comes
in bursts of similar jobs whose run times differ from the bursts before them, and a burst's
first finished jobs then speak for the rest of it.

A running job is predicted conditionally on how long it has run already: the quantiles of the
similar jobs that ran longer than that. When it has outlived every similar job, what is left is
taken to be as long as what it ran (the Lindy estimate, p50) to nine times that (p90), and the
basis says so. `quantile` gives any other quantile of the same distribution (the forecast spreads
the ends of many jobs over it rather than putting them all at its median).
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import math
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

MIN_SAMPLES = 5  # a group speaks once it has seen this many finished jobs
KEEP_SAMPLES = 500  # per group, the most recent
HALF_LIFE_S = 3600.0  # a sample's weight halves for each this much older than the newest
_LIGHTEST = -60.0  # log2 of the least weight: an old sample still counts a little, never 0
_SUFFIX = re.compile(r"([-_.]?([0-9]+|[0-9a-f]{5,}))$")


@dataclass(frozen=True, slots=True)
class JobShape:
    """What is known of a job before it runs."""

    tenant: str
    name: str = ""
    labels: tuple[tuple[str, str], ...] = ()
    pod_sets: tuple[tuple[int, int], ...] = ()  # (pods, GPUs per pod) per pod set

    @property
    def gpus(self) -> int:
        return sum(count * gpus for count, gpus in self.pod_sets)

    @staticmethod
    def of(
        tenant: str,
        name: str = "",
        labels: Mapping[str, str] | None = None,
        pod_sets: tuple[tuple[int, int], ...] = (),
    ) -> JobShape:
        return JobShape(tenant, name, tuple(sorted((labels or {}).items())), pod_sets)


@dataclass(frozen=True, slots=True)
class Prediction:
    p50_s: float  # total run time, seconds
    p90_s: float
    samples: int
    basis: str
    # From a group of the tenant's own jobs with enough samples: a group across tenants (the
    # shape, the GPU count, everything) speaks for anyone, and a prior the tenant's queue
    # declares stands until the tenant's own work has finished (issue 37)
    tenant_specific: bool = False


@dataclass(frozen=True, slots=True)
class Prior:
    """A run time assumed before any similar job has finished (issue 37): a declared limit the
    job is stopped at (`bound`), or its queue's default."""

    seconds: float
    basis: str  # what it is, e.g. "declared limit (maximumExecutionTimeSeconds 3600 s)"
    bound: bool = False

    def prediction(self, elapsed_s: float = 0.0) -> Prediction:
        """The prediction it gives a job that has run `elapsed_s`: a default the job outlived
        leaves what is left to the Lindy estimate, as an outlived group does."""
        if self.bound or elapsed_s < self.seconds:
            return Prediction(self.seconds, self.seconds, 0, f"prior: {self.basis}")
        return Prediction(
            _lindy(elapsed_s, 0.5),
            _lindy(elapsed_s, 0.9),
            0,
            f"prior: {self.basis}, outlived: as long again expected",
        )


def name_pattern(name: str) -> str:
    """The name without trailing counters or hashes: train-resnet-0042-a1b2c -> train-resnet."""
    out = name
    while True:
        stripped = _SUFFIX.sub("", out)
        if stripped == out or not stripped:
            return out
        out = stripped


def _groups(shape: JobShape) -> list[tuple[tuple[object, ...], str]]:
    """(group key, how it reads), most specific first."""
    pattern = name_pattern(shape.name)
    gpus = f"{shape.gpus} GPUs"
    pods = " + ".join(f"{n} x {g} GPU" for n, g in shape.pod_sets) or "no GPU"
    t = f"tenant {shape.tenant}"
    out: list[tuple[tuple[object, ...], str]] = []
    if pattern:
        if shape.labels:
            out.append(
                (
                    ("tnls", shape.tenant, pattern, shape.labels, shape.pod_sets),
                    f"{t}, name {pattern}, same labels, {pods}",
                )
            )
        out.append((("tns", shape.tenant, pattern, shape.pod_sets), f"{t}, name {pattern}, {pods}"))
        out.append((("tn", shape.tenant, pattern), f"{t}, name {pattern}"))
    out.append((("ts", shape.tenant, shape.pod_sets), f"{t}, {pods}"))
    out.append((("tg", shape.tenant, shape.gpus), f"{t}, {gpus}"))
    out.append((("s", shape.pod_sets), pods))
    out.append((("g", shape.gpus), gpus))
    out.append((("all",), "all tenants"))
    return out


_TENANT_GROUPS = frozenset({"tnls", "tns", "tn", "ts", "tg"})  # the _groups keyed by tenant


@dataclass(frozen=True, slots=True)
class _Ordered:
    """A group's durations sorted, with the weight of all before each and where each stands."""

    durations: list[float]
    before: list[float]  # before[i]: the summed weights of durations[:i]; one more at the end
    mids: list[float]  # mids[i]: before[i] + half of weights[i], where durations[i] stands


@dataclass
class _Samples:
    recent: deque[tuple[float, float]] = field(
        default_factory=lambda: deque(maxlen=KEEP_SAMPLES)
    )  # (finished at, duration)
    ordered: dict[float | None, _Ordered] = field(default_factory=dict)  # by half-life, on demand

    def add(self, finished_at: float, duration_s: float) -> None:
        self.recent.append((finished_at, duration_s))
        self.ordered.clear()

    def sorted(self, half_life_s: float | None) -> _Ordered:
        """The durations sorted, each weighing 2^-(age / half_life_s) (None: all the same)."""
        ordered = self.ordered.get(half_life_s)
        if ordered is None:
            newest = max(at for at, _ in self.recent)
            pairs = sorted(
                (duration, _weight(newest - at, half_life_s)) for at, duration in self.recent
            )
            weights = [w for _, w in pairs]
            before = [0.0, *itertools.accumulate(weights)]
            ordered = self.ordered[half_life_s] = _Ordered(
                [d for d, _ in pairs],
                before,
                [b + w / 2.0 for b, w in zip(before, weights, strict=False)],
            )
        return ordered


def _weight(age_s: float, half_life_s: float | None) -> float:
    if half_life_s is None:
        return 1.0
    return math.pow(2.0, max(-age_s / half_life_s, _LIGHTEST))


class RuntimePredictor:
    """Learns from `observe` (finished jobs only) and predicts with `predict`.

    Within a group, recent jobs weigh more: a sample's weight halves for every `half_life_s` it
    finished before the group's newest (None: all weigh the same). Work comes in bursts of
    similar jobs that differ from the bursts before them, so a burst's first jobs to finish
    should speak for the rest of it rather than be outvoted by the older history. Asked with
    `long_run`, the same jobs answer weighing the same: backfill's promise to a reservation must
    hold over the long run (weighted, it let more short jobs in front of reserved gangs:
    docs/benchmarks.md, issue 18, fourth pass)."""

    def __init__(
        self, min_samples: int = MIN_SAMPLES, half_life_s: float | None = HALF_LIFE_S
    ) -> None:
        self.min_samples = min_samples
        self.half_life_s = half_life_s
        self._groups: dict[tuple[object, ...], _Samples] = {}
        self.observed = 0

    def observe(self, shape: JobShape, duration_s: float, *, finished_at: float) -> None:
        """A job of this shape finished at `finished_at` (seconds, any fixed origin) after
        running `duration_s`."""
        if not duration_s >= 0 or not math.isfinite(finished_at):  # also refuses NaN
            return
        self.observed += 1
        for key, _ in _groups(shape):
            self._groups.setdefault(key, _Samples()).add(float(finished_at), float(duration_s))

    def predict(
        self, shape: JobShape, elapsed_s: float = 0.0, *, long_run: bool = False
    ) -> Prediction | None:
        """Total run time of a job of this shape that has run `elapsed_s` so far; None before any
        finished job was seen."""
        half_life_s = None if long_run else self.half_life_s
        basis = self._basis(shape, elapsed_s, half_life_s)
        if basis is None:
            return None
        longer, key, reads = basis
        own = key[0] in _TENANT_GROUPS
        if longer is None:
            return Prediction(
                _lindy(elapsed_s, 0.5),
                _lindy(elapsed_s, 0.9),
                0,
                f"ran longer than every similar job ({reads}): as long again expected",
                own,
            )
        ordered, first = longer
        count = len(ordered.durations) - first
        label = "similar jobs" if not elapsed_s else "similar jobs that ran longer"
        return Prediction(
            _quantile(ordered, first, 0.5),
            _quantile(ordered, first, 0.9),
            count,
            f"p50 of {count} {label} ({reads}){_weighting(half_life_s)}",
            own and count >= self.min_samples,
        )

    def quantile(
        self, shape: JobShape, q: float, elapsed_s: float = 0.0, *, long_run: bool = False
    ) -> float | None:
        """The q-quantile (0 < q < 1) of the total run time `predict` reads its p50 and p90
        from; None when it has no prediction."""
        basis = self._basis(shape, elapsed_s, None if long_run else self.half_life_s)
        if basis is None:
            return None
        longer, _, _ = basis
        return _lindy(elapsed_s, q) if longer is None else _quantile(*longer, q)

    def _basis(
        self, shape: JobShape, elapsed_s: float, half_life_s: float | None
    ) -> tuple[tuple[_Ordered, int] | None, tuple[object, ...], str] | None:
        """The durations of the most specific group with enough of them that ran longer than
        `elapsed_s` (the group sorted, and where those begin in it), its key and how it reads;
        (None, key, reads) when the job outlived every such group."""
        outlived: tuple[tuple[object, ...], str] | None = None
        for key, reads in _groups(shape):
            samples = self._groups.get(key)
            if samples is None:
                continue
            ordered = samples.sorted(half_life_s)
            first = bisect.bisect_right(ordered.durations, elapsed_s) if elapsed_s > 0 else 0
            needed = 1 if key == ("all",) else self.min_samples
            if len(ordered.durations) - first >= needed:
                return (ordered, first), key, reads
            if len(ordered.durations) >= needed and outlived is None:
                outlived = key, reads
        if outlived is not None and elapsed_s > 0:
            return None, *outlived
        return None


def _weighting(half_life_s: float | None) -> str:
    if half_life_s is None:
        return ""
    return f", the newer weighing more (weight halves every {_duration(half_life_s)})"


def spread(key: str) -> float:
    """A quantile in (0, 1) fixed by a job's key and uniform over keys: a replay that ends each
    of many jobs at its own quantile, rather than all at the median, keeps the spread of their
    ends, so the first of them to end does so early and the last late, as they really do (the
    k-th end among many jobs lies near their k/n quantile, not at their median)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2.0**64


def _lindy(elapsed_s: float, q: float) -> float:
    """A job that outlived every similar one: what is left is taken to be Pareto-distributed
    with the time run so far as its scale, P(left > x) = elapsed / (elapsed + x), whose
    quantile q is elapsed * q / (1 - q): the p50 is as long again, the p90 nine times as long."""
    return round(elapsed_s / (1.0 - min(q, 0.99)), 6)  # (1 - 0.9 is not 0.1 in binary)


def _quantile(ordered: _Ordered, first: int, q: float) -> float:
    """The weighted q-quantile of ordered.durations[first:]: each duration stands at the middle
    of its weight's stretch of the cumulative weight, interpolated linearly between them, and
    held at the ends (with equal weights, a median of an even count is the middle of the two)."""
    durations, before, mids = ordered.durations, ordered.before, ordered.mids
    last = len(durations) - 1
    base = before[first]
    target = base + q * (before[-1] - base)
    if target <= mids[first]:
        return durations[first]
    if target >= mids[last]:
        return durations[last]
    k = bisect.bisect_right(mids, target, first, last + 1) - 1
    low, high = durations[k], durations[k + 1]
    fraction = (target - mids[k]) / (mids[k + 1] - mids[k])
    return min(max(low + (high - low) * fraction, low), high)


def _duration(seconds: float) -> str:
    hours = seconds / 3600.0
    return f"{hours:g} h" if hours >= 1 else f"{seconds / 60.0:g} min"
