"""Run times predicted online from finished work only (issue 18): nothing here ever sees how long
a pending or running job will really take.

Each finished job is filed under a hierarchy of ever broader groups of similar jobs: the same
tenant, name pattern (the name without its trailing counter or hash), labels and pod-set shape;
then the same tenant and name pattern; tenant and shape; tenant and GPU count; the shape; the GPU
count; everything. A prediction comes from the most specific group with enough samples, as
empirical quantiles (p50, p90) of its most recent durations, and says which group it came from
("p50 of 37 similar jobs: tenant vision, name train-resnet").

A running job is predicted conditionally on how long it has run already: the quantiles of the
similar jobs that ran longer than that. When it has outlived every similar job, what is left is
taken to be as long as what it ran (the Lindy estimate, p50) to nine times that (p90), and the
basis says so. `quantile` gives any other quantile of the same distribution (the forecast spreads
the ends of many jobs over it rather than putting them all at its median).
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

MIN_SAMPLES = 5  # a group speaks once it has seen this many finished jobs
KEEP_SAMPLES = 500  # per group, the most recent
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


@dataclass
class _Samples:
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=KEEP_SAMPLES))
    ordered: list[float] | None = None  # sorted copy, rebuilt on demand

    def add(self, duration_s: float) -> None:
        self.recent.append(duration_s)
        self.ordered = None

    def sorted(self) -> list[float]:
        if self.ordered is None:
            self.ordered = sorted(self.recent)
        return self.ordered


class RuntimePredictor:
    """Learns from `observe` (finished jobs only) and predicts with `predict`."""

    def __init__(self, min_samples: int = MIN_SAMPLES) -> None:
        self.min_samples = min_samples
        self._groups: dict[tuple[object, ...], _Samples] = {}
        self.observed = 0

    def observe(self, shape: JobShape, duration_s: float) -> None:
        if not duration_s >= 0:  # also refuses NaN
            return
        self.observed += 1
        for key, _ in _groups(shape):
            self._groups.setdefault(key, _Samples()).add(float(duration_s))

    def predict(self, shape: JobShape, elapsed_s: float = 0.0) -> Prediction | None:
        """Total run time of a job of this shape that has run `elapsed_s` so far; None before any
        finished job was seen."""
        basis = self._basis(shape, elapsed_s)
        if basis is None:
            return None
        longer, reads = basis
        if longer is None:
            return Prediction(
                _lindy(elapsed_s, 0.5),
                _lindy(elapsed_s, 0.9),
                0,
                f"ran longer than every similar job ({reads}): as long again expected",
            )
        label = "similar jobs" if not elapsed_s else "similar jobs that ran longer"
        return Prediction(
            _quantile(longer, 0.5),
            _quantile(longer, 0.9),
            len(longer),
            f"p50 of {len(longer)} {label} ({reads})",
        )

    def quantile(self, shape: JobShape, q: float, elapsed_s: float = 0.0) -> float | None:
        """The q-quantile (0 < q < 1) of the total run time `predict` reads its p50 and p90
        from; None when it has no prediction."""
        basis = self._basis(shape, elapsed_s)
        if basis is None:
            return None
        longer, _ = basis
        return _lindy(elapsed_s, q) if longer is None else _quantile(longer, q)

    def _basis(self, shape: JobShape, elapsed_s: float) -> tuple[list[float] | None, str] | None:
        """The durations of the most specific group with enough of them that ran longer than
        `elapsed_s`, and how it reads; (None, reads) when the job outlived every such group."""
        outlived = ""
        for key, reads in _groups(shape):
            samples = self._groups.get(key)
            if samples is None:
                continue
            ordered = samples.sorted()
            longer = (
                ordered[bisect.bisect_right(ordered, elapsed_s) :] if elapsed_s > 0 else ordered
            )
            needed = 1 if key == ("all",) else self.min_samples
            if len(longer) >= needed:
                return longer, reads
            if len(ordered) >= needed and not outlived:
                outlived = reads
        if outlived and elapsed_s > 0:
            return None, outlived
        return None


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


def _quantile(ordered: list[float], q: float) -> float:
    k = (len(ordered) - 1) * q
    low = int(k)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (k - low)
