"""DCGM field semantics and dcgm-exporter label conventions. Pure: no Django, no I/O.

Samples (from `telemetry.parsing`) become one `GpuSample` per GPU (or MIG instance) and pod:
the fields of one GPU are gathered, their units normalized, and the labels that name the node,
the GPU and the pod are read in every spelling dcgm-exporter and Prometheus produce
(`reference/wire-formats.md` §1):

- node: telemetry.placement (a node label, `Hostname`, `instance`, the scrape target; only the
  cluster's nodes when they are known, at most so many per source);
- GPU: `gpu` (index), `UUID` / `uuid` (`--use-old-namespace`), `modelName`, `pci_bus_id`;
  MIG instances add `GPU_I_PROFILE` and `GPU_I_ID` (the UUID stays the parent GPU's);
- pod: `exported_pod` / `pod` / `pod_name`, and the same for namespace and container. A
  Prometheus that scrapes the exporter with `honor_labels: false` and its own `pod`/`namespace`
  target labels (prometheus-operator does) renames the exporter's labels `exported_*`; the
  unprefixed ones then name the *exporter's* pod. Such series carry the operator's `service` /
  `endpoint` target labels, and on them an unprefixed `pod` is not a workload. Empty values
  (`pod=""`, 2.x releases) mean no pod.

Metric names are read in either case (`DCGM_FI_PROF_GR_ENGINE_ACTIVE`, and the lower-case
`dcgm_fi_prof_gr_engine_active` that NVIDIA/dcgm-exporter#272 shows); the 1.x names
(`dcgm_gpu_utilization`, ...) are other metrics, counted unknown.

Units: utilizations become ratios 0-1 (`DCGM_FI_DEV_GPU_UTIL` is in %, the `PROF_*` fields are
already ratios), framebuffer stays MiB, power W, temperature °C; `XID_ERRORS` is the last XID
seen, not a count. DCGM's "blank" sentinels (values from 0x7ffffff0 up, printed raw by old
releases) and NaN mean "no value". Fields that are absent stay absent: the `PROF_*` fields on
pre-Volta GPUs, `GPU_UTIL` and `MEM_COPY_UTIL` on MIG instances.

Nothing outside what a GPU can measure is stored: each field has a range (a ratio 0-1, a
percentage 0-100, framebuffer, power and temperature within physical bounds); a value just past
it (by CLAMP_MARGIN of the range: noise) is kept at its edge and counted, anything further
(-5 or 500 for a percentage, +-Inf) is left out and counted, and so is a whole series whose GPU
index is not one (`-1`, `abc`, `""`, beyond a smallint) or whose labels are longer than their
columns (MapStats.skipped, by reason; `ingesttelemetry` reports them per cycle and in /metrics).
One bad series never costs the others their cycle.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import NamedTuple, TypeVar

from telemetry.parsing import ColumnBlock, Sample, Scrape, SeriesGroup
from telemetry.placement import NO_NODE, Attribution

__all__ = [
    "FIELDS",
    "FieldSpec",
    "GpuKey",
    "GpuSample",
    "MapStats",
    "PodRef",
    "busy_ratio",
    "gpu_samples",
    "gpu_samples_from_groups",
    "gpu_samples_from_scrape",
]


@dataclass(frozen=True)
class FieldSpec:
    metric: str
    attr: str  # the key in GpuSample.values
    unit: str
    scale: float  # exposition value * scale = value in `unit`
    integer: bool  # dcgm-exporter prints it with %d (else %f)
    help: str
    maximum: float = 1.0  # in `unit`; the minimum is 0 (`minimum` for temperatures)
    minimum: float = 0.0

    @property
    def exposed_range(self) -> tuple[float, float]:
        """The range in exposition units, widened by CLAMP_MARGIN: values in the margin are
        clamped to the range (measurement noise, such as an engine ratio of 1.02), values
        beyond it are refused (-5 %, 500 %, -Inf)."""
        margin = (self.maximum - self.minimum) * CLAMP_MARGIN
        return (self.minimum - margin) / self.scale, (self.maximum + margin) / self.scale


CLAMP_MARGIN = 0.02
MAX_FB_MIB = 16 * 2**20  # 16 TiB of framebuffer: beyond any GPU
MAX_POWER_W = 10_000.0
MAX_XID = 2**31 - 1

FIELDS: dict[str, FieldSpec] = {
    spec.metric: spec
    for spec in (
        FieldSpec(
            "DCGM_FI_DEV_GPU_UTIL", "gpu_util", "ratio", 0.01, True, "GPU utilization (in %)."
        ),
        FieldSpec(
            "DCGM_FI_DEV_MEM_COPY_UTIL",
            "mem_copy_util",
            "ratio",
            0.01,
            True,
            "Memory utilization (in %).",
        ),
        FieldSpec(
            "DCGM_FI_DEV_FB_USED",
            "fb_used_mib",
            "MiB",
            1.0,
            True,
            "Framebuffer memory used (in MiB).",
            maximum=MAX_FB_MIB,
        ),
        FieldSpec(
            "DCGM_FI_DEV_FB_FREE",
            "fb_free_mib",
            "MiB",
            1.0,
            True,
            "Framebuffer memory free (in MiB).",
            maximum=MAX_FB_MIB,
        ),
        FieldSpec(
            "DCGM_FI_DEV_POWER_USAGE",
            "power_w",
            "W",
            1.0,
            False,
            "Power draw (in W).",
            maximum=MAX_POWER_W,
        ),
        FieldSpec(
            "DCGM_FI_DEV_GPU_TEMP",
            "temp_c",
            "C",
            1.0,
            True,
            "GPU temperature (in C).",
            maximum=150.0,
            minimum=-40.0,
        ),
        FieldSpec(
            "DCGM_FI_DEV_XID_ERRORS",
            "xid_last",
            "xid",
            1.0,
            True,
            "Value of the last XID error encountered.",
            maximum=MAX_XID,
        ),
        FieldSpec(
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
            "gr_engine_active",
            "ratio",
            1.0,
            False,
            "Ratio of time the graphics engine is active.",
        ),
        FieldSpec(
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "tensor_active",
            "ratio",
            1.0,
            False,
            "Ratio of cycles the tensor (HMMA) pipe is active.",
        ),
        FieldSpec(
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "dram_active",
            "ratio",
            1.0,
            False,
            "Ratio of cycles the device memory interface is active sending or receiving data.",
        ),
    )
}

# Values from here up are DCGM "blank" sentinels (DCGM_INT32_BLANK = 0x7ffffff0; the int64 and
# fp64 blanks are larger still), not measurements.
DCGM_BLANK = float(0x7FFFFFF0)


class GpuKey(NamedTuple):
    node: str
    gpu_index: int
    mig_instance: str  # GPU_I_ID, "" for a whole GPU


class PodRef(NamedTuple):
    namespace: str
    pod: str
    container: str


@dataclass(slots=True)
class GpuSample:
    """The fields of one GPU (or MIG instance) as seen for one pod, or for no pod."""

    key: GpuKey
    uuid: str
    model_name: str = ""
    pci_bus_id: str = ""
    mig_profile: str = ""
    pod: PodRef | None = None
    values: dict[str, float] = field(default_factory=dict)  # FieldSpec.attr -> value in unit
    timestamp: float | None = None  # Unix seconds, when the source gave one

    @property
    def busy(self) -> float | None:
        return busy_ratio(self.values)


def busy_ratio(values: Mapping[str, float]) -> float | None:
    """How busy a GPU is, 0-1: PROF_GR_ENGINE_ACTIVE where measured, else GPU_UTIL/100."""
    busy = values.get("gr_engine_active")
    if busy is None:
        busy = values.get("gpu_util")
    if busy is None:
        return None
    return min(max(busy, 0.0), 1.0)


# Reasons a sample is skipped (the keys of MapStats.skipped), besides unknown metrics and blanks.
NO_GPU_INDEX = "no gpu label"
BAD_GPU_INDEX = "gpu label not an index"
GPU_INDEX_RANGE = "gpu index out of range"
NOT_FINITE = "value not finite"
OUT_OF_RANGE = "value out of range"  # f"{OUT_OF_RANGE}: {metric}"
LABEL_TOO_LONG = "label too long"  # f"{LABEL_TOO_LONG}: {what}"

# The longest label values stored (telemetry/models.py sizes its columns with these), and the
# largest GPU index (a smallint column). A series beyond them is skipped and counted rather than
# failing the batch it came in (on PostgreSQL, one of them made every cycle fail).
MAX_GPU_INDEX = 32767
LABEL_LIMITS = {
    "node": 253,
    "uuid": 64,
    "model_name": 128,
    "mig_profile": 32,
    "mig_instance": 16,
    "namespace": 253,
    "pod": 253,
    "container": 253,
}
_GPU_INDEX = re.compile(r"^[0-9]{1,5}$")


@dataclass
class MapStats:
    samples: int = 0
    used: int = 0  # samples that filled a field of a GPU (clamped ones included)
    unknown_metric: int = 0  # other DCGM fields, other exporters' metrics, 1.x lowercase names
    blank: int = 0  # NaN or DCGM blank sentinels
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> samples left out
    clamped: dict[str, int] = field(default_factory=dict)  # metric -> values kept at its edge
    attributed: dict[str, int] = field(default_factory=dict)  # rule -> label sets it placed
    unknown_nodes: list[str] = field(default_factory=list)  # the first names that matched none

    MAX_EXAMPLES = 5

    @property
    def no_gpu(self) -> int:
        """Samples of a known field without a usable node or GPU index."""
        reasons = (NO_NODE, NO_GPU_INDEX, BAD_GPU_INDEX, GPU_INDEX_RANGE)
        return sum(self.skipped.get(reason, 0) for reason in reasons)

    def skip(self, reason: str, count: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + count

    def merge(self, other: MapStats) -> None:
        self.samples += other.samples
        self.used += other.used
        self.unknown_metric += other.unknown_metric
        self.blank += other.blank
        for reason, count in other.skipped.items():
            self.skip(reason, count)
        for metric, count in other.clamped.items():
            self.clamped[metric] = self.clamped.get(metric, 0) + count
        for rule, count in other.attributed.items():
            self.attributed[rule] = self.attributed.get(rule, 0) + count
        room = self.MAX_EXAMPLES - len(self.unknown_nodes)
        self.unknown_nodes.extend(other.unknown_nodes[: max(room, 0)])


def gpu_samples(
    samples: Iterable[Sample],
    *,
    default_node: str = "",
    attribution: Attribution | None = None,
) -> tuple[list[GpuSample], MapStats]:
    """Gather samples into GpuSamples, one per (GPU or MIG instance, pod).

    `default_node` is the scrape target's host (a direct scrape knows its target); `attribution`
    the cluster's nodes and the node cap (telemetry.placement). A GPU shared by several pods
    (time-slicing, MPS) appears once per pod, with the same values.
    """
    groups: dict[frozenset[tuple[str, str]], SeriesGroup] = {}
    for sample in samples:
        key = frozenset(sample.labels.items())
        group = groups.get(key)
        if group is None:
            group = groups[key] = SeriesGroup(sample.labels)
        group.add(sample.name, sample.value, sample.timestamp)
    return gpu_samples_from_groups(
        groups.values(), default_node=default_node, attribution=attribution
    )


_V = TypeVar("_V")


def _either_case(table: Mapping[str, _V]) -> dict[str, _V]:
    """A table keyed by metric name, for the names as printed in either case."""
    return {**table, **{metric.lower(): value for metric, value in table.items()}}


_ATTR = _either_case({metric: spec.attr for metric, spec in FIELDS.items()})
_SCALE = _either_case({metric: spec.scale for metric, spec in FIELDS.items()})
_CANONICAL = _either_case({metric: metric for metric in FIELDS})
_SCALED = tuple((spec.attr, spec.scale) for spec in FIELDS.values() if spec.scale != 1.0)
# Each field's range, and its range widened by the clamping margin, in exposition units.
_EDGES = _either_case(
    {m: (spec.minimum / spec.scale, spec.maximum / spec.scale) for m, spec in FIELDS.items()}
)
_MARGINS = _either_case({metric: spec.exposed_range for metric, spec in FIELDS.items()})
_Bounds = tuple[tuple[float, ...], tuple[float, ...]]


def gpu_samples_from_groups(
    groups: Iterable[SeriesGroup],
    *,
    default_node: str = "",
    attribution: Attribution | None = None,
) -> tuple[list[GpuSample], MapStats]:
    """gpu_samples() for the output of parsing.parse_grouped(): each label set is read once.
    Bad series (a GPU index that is not one, labels longer than what is stored, a node not in
    the cluster or over the cap) and bad values (outside their field's range) are skipped and
    counted by reason, never fatal."""
    mapper = _Mapper(default_node, attribution or Attribution())
    for group in groups:
        mapper.group(group)
    return mapper.result()


def gpu_samples_from_scrape(
    scrape: Scrape, *, default_node: str = "", attribution: Attribution | None = None
) -> tuple[list[GpuSample], MapStats]:
    """gpu_samples_from_groups() for the output of parsing.parse_scrape(): the fields read as
    whole families are checked against their range and scaled a column at a time (a C-level
    pass per field, not a check per GPU), then each label set is read once."""
    mapper = _Mapper(default_node, attribution or Attribution())
    for block in scrape.columns:
        mapper.block(block)
    for group in scrape.groups:
        mapper.group(group)
    return mapper.result()


# A whole column is taken as it is when its sum is a number (no NaN) and its extremes are within
# the field's range and below DCGM's blanks; any other column is checked value by value.
_COLUMN_EDGES = {
    metric: (low, min(high, math.nextafter(DCGM_BLANK, 0.0)))
    for metric, (low, high) in _EDGES.items()
}


class _Mapper:
    """Samples -> GpuSamples, one per (GPU or MIG instance, pod), with the stats."""

    def __init__(self, default_node: str, rules: Attribution) -> None:
        self.default_node = default_node
        self.rules = rules
        self.stats = MapStats()
        self.gpus: dict[tuple[GpuKey, PodRef | None], GpuSample] = {}
        self.bounds: dict[tuple[str, ...], _Bounds] = {}
        self.samples = self.known = 0

    def group(self, group: SeriesGroup) -> None:
        values = group.values
        self.samples += len(values)
        self.known += len(values.keys() & _ATTR.keys())
        found = _known_values(values, self.bounds, self.stats)
        if found:
            self.place(group.labels, found, group.timestamps)

    def block(self, block: ColumnBlock) -> None:
        count = len(block.labels)
        self.samples += count * len(block.columns)
        attrs: list[str] = []
        clean: list[list[float]] = []
        messy: list[str] = []
        known = [metric for metric in block.columns if metric in _ATTR]
        # A field printed in both cases: value by value, in order, as a label set would be read.
        twice = len({_ATTR[metric] for metric in known}) != len(known)
        for metric in known:
            column = block.columns[metric]
            self.known += count
            low, high = _COLUMN_EDGES[metric]
            total = sum(column)
            if not twice and total == total and min(column) >= low and max(column) <= high:
                scale = _SCALE[metric]
                attrs.append(_ATTR[metric])
                clean.append(column if scale == 1.0 else [value * scale for value in column])
            else:
                messy.append(metric)
        if not attrs and not messy:
            return
        rows: Iterable[tuple[float, ...]] = zip(*clean, strict=True) if clean else repeat(())
        place = self.place
        if not messy:
            for labels, row in zip(block.labels, rows, strict=False):
                place(labels, dict(zip(attrs, row, strict=True)), None)
            return
        for index, (labels, row) in enumerate(zip(block.labels, rows, strict=False)):
            found = dict(zip(attrs, row, strict=True))
            raw = {metric: block.columns[metric][index] for metric in messy}
            found.update(_known_values(raw, self.bounds, self.stats))
            if found:
                place(labels, found, None)

    def place(
        self, labels: Mapping[str, str], found: dict[str, float], stamps: dict[str, float] | None
    ) -> None:
        stats = self.stats
        sample = _gpu_sample(labels, found, self.default_node, self.rules, stats)
        if isinstance(sample, str):
            stats.skip(sample, len(found))
            return
        gpu = self.gpus.setdefault((sample.key, sample.pod), sample)
        if gpu is not sample:  # the same GPU and pod, met in another label set
            gpu.values.update(found)
        stats.used += len(found)
        if stamps:
            newest = max(stamps.values())
            if gpu.timestamp is None or newest > gpu.timestamp:
                gpu.timestamp = newest

    def result(self) -> tuple[list[GpuSample], MapStats]:
        self.stats.samples = self.samples
        self.stats.unknown_metric = self.samples - self.known
        return list(self.gpus.values()), self.stats


def _known_values(
    values: Mapping[str, float], bounds: dict[tuple[str, ...], _Bounds], stats: MapStats
) -> dict[str, float]:
    """The DCGM fields among `values`, renamed to FieldSpec.attr and scaled to their unit:
    NaN and blank sentinels left out (no value), values just past their range clamped to it,
    the others left out, and both counted."""
    if values and values.keys() <= _ATTR.keys():
        # The usual case, every field known and in range: checked with C-level builtins (a
        # scrape lists the same fields in the same order for every GPU, so the bounds of that
        # order are built once). NaN fails every comparison and takes the slow way.
        names = tuple(values)
        lows, highs = bounds.get(names) or bounds.setdefault(
            names, (tuple(_EDGES[n][0] for n in names), tuple(_EDGES[n][1] for n in names))
        )
        numbers = values.values()
        if (
            all(map(operator.le, lows, numbers))
            and all(map(operator.le, numbers, highs))
            and max(numbers) < DCGM_BLANK
        ):
            found = dict(zip(map(_ATTR.__getitem__, values), numbers, strict=True))
            for attr, scale in _SCALED:
                if attr in found:
                    found[attr] *= scale
            return found
    found = {}
    for metric, value in values.items():
        if metric not in _ATTR:
            continue
        if value != value or DCGM_BLANK <= value < math.inf:
            stats.blank += 1
            continue
        if not math.isfinite(value):
            stats.skip(NOT_FINITE)
            continue
        low, high = _EDGES[metric]
        if not low <= value <= high:
            widest_low, widest_high = _MARGINS[metric]
            if not widest_low <= value <= widest_high:
                stats.skip(f"{OUT_OF_RANGE}: {_CANONICAL[metric]}")
                continue
            value = min(max(value, low), high)
            name = _CANONICAL[metric]
            stats.clamped[name] = stats.clamped.get(name, 0) + 1
        found[_ATTR[metric]] = value * _SCALE[metric]
    return found


def _gpu_index(label: str) -> int | str:
    """The `gpu` label as an index, or why it is none."""
    if not label:
        return NO_GPU_INDEX
    if not _GPU_INDEX.match(label):
        return BAD_GPU_INDEX
    index = int(label)
    return GPU_INDEX_RANGE if index > MAX_GPU_INDEX else index


# The `gpu` labels met (a node has a few GPUs, so a scrape has a few distinct ones).
_INDEXES: dict[str, int | str] = {str(i): i for i in range(64)}


def _gpu_sample(
    labels: Mapping[str, str],
    values: dict[str, float],
    target: str,
    rules: Attribution,
    stats: MapStats,
) -> GpuSample | str:
    """The GPU (and pod) a label set names, with `values`, or why it names none that can be
    stored."""
    get = labels.get
    label = get("gpu", "")
    index = _INDEXES.get(label)
    if index is None:
        index = _gpu_index(label)
    if isinstance(index, str):
        return index
    node, rule, named = rules.place(labels, target)
    if not node:
        examples = stats.unknown_nodes
        if named and len(examples) < stats.MAX_EXAMPLES and named not in examples:
            examples.append(named)
        return rule
    stats.attributed[rule] = stats.attributed.get(rule, 0) + 1
    pod = pod_of(labels)
    mig_instance = get("GPU_I_ID", "")
    uuid = get("UUID") or get("uuid") or ""
    model_name = get("modelName", "")
    mig_profile = get("GPU_I_PROFILE", "")
    if (
        len(node) > _LIMIT_NODE
        or len(uuid) > _LIMIT_UUID
        or len(model_name) > _LIMIT_MODEL
        or len(mig_instance) > _LIMIT_MIG_INSTANCE
        or len(mig_profile) > _LIMIT_MIG_PROFILE
        or (pod is not None and max(map(len, pod)) > _LIMIT_POD)
    ):
        lengths = {
            "node": node,
            "uuid": uuid,
            "model_name": model_name,
            "mig_instance": mig_instance,
            "mig_profile": mig_profile,
            **(dict(zip(("namespace", "pod", "container"), pod, strict=True)) if pod else {}),
        }
        name = next(k for k, v in lengths.items() if len(v) > LABEL_LIMITS[k])
        return f"{LABEL_TOO_LONG}: {name}"
    key = GpuKey(node, index, mig_instance)
    return GpuSample(key, uuid, model_name, get("pci_bus_id", ""), mig_profile, pod, values)


_LIMIT_NODE, _LIMIT_UUID, _LIMIT_MODEL, _LIMIT_MIG_INSTANCE, _LIMIT_MIG_PROFILE = (
    LABEL_LIMITS[k] for k in ("node", "uuid", "model_name", "mig_instance", "mig_profile")
)
_LIMIT_POD = min(LABEL_LIMITS[k] for k in ("namespace", "pod", "container"))


def pod_of(labels: Mapping[str, str]) -> PodRef | None:
    """The workload pod a series belongs to, in any label spelling; None for an idle GPU."""
    get = labels.get
    if "service" in labels or "endpoint" in labels:
        # prometheus-operator's target labels: the unprefixed pod labels are the exporter's own.
        pod = get("exported_pod")
        if not pod:
            return None
        return PodRef(get("exported_namespace", ""), pod, get("exported_container", ""))
    pod = get("exported_pod") or get("pod") or get("pod_name")
    if not pod:
        return None
    return PodRef(
        get("exported_namespace") or get("namespace") or get("pod_namespace") or "",
        pod,
        get("exported_container") or get("container") or get("container_name") or "",
    )
