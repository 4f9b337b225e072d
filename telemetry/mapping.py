"""dcgm-exporter samples -> a GpuBatch: one row per GPU (or MIG instance) and pod, the DCGM fields
in their units (telemetry.dcgm says what each field and label means). Pure: no Django, no I/O.

Label sets are read one by one where they must be (lines read one by one, odd spellings, bad
values), but a scrape read as whole families (parsing.ColumnBlock: every field of every GPU, in
the same order) is mapped a column at a time: each field is range-checked and scaled with a few
C-level passes, each label the mapper reads becomes a column in one pass over the label sets, the
placement rules run once per distinct node naming (telemetry.placement), and the batch is
extended with those columns: no object per GPU. Both ways give the same rows and the same
counts (tests/telemetry/test_dcgm.py checks it on generated scrapes); when a block has anything
the column path does not handle, the block is read label set by label set.
"""

from __future__ import annotations

import math
import operator
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, compress, repeat
from operator import methodcaller
from typing import Any, TypeVar

from telemetry.batch import GpuBatch, GpuKey, GpuSample, PodRef, RowKey
from telemetry.dcgm import (
    BAD_GPU_INDEX,
    DCGM_BLANK,
    FIELDS,
    GPU_INDEX_RANGE,
    LABEL_LIMITS,
    LABEL_TOO_LONG,
    MAX_GPU_INDEX,
    NO_GPU_INDEX,
    NOT_FINITE,
    OUT_OF_RANGE,
    MapStats,
    pod_of,
)
from telemetry.parsing import ColumnBlock, Sample, Scrape, SeriesGroup
from telemetry.placement import NODE_LABELS, Attribution, Placement

__all__ = ["gpu_samples", "gpu_samples_from_groups", "gpu_samples_from_scrape"]

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
_GPU_INDEX = re.compile(r"^[0-9]{1,5}$")


def gpu_samples(
    samples: Iterable[Sample],
    *,
    default_node: str = "",
    attribution: Attribution | None = None,
) -> tuple[GpuBatch, MapStats]:
    """Gather samples into a GpuBatch, a row per (GPU or MIG instance, pod).

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


def gpu_samples_from_groups(
    groups: Iterable[SeriesGroup],
    *,
    default_node: str = "",
    attribution: Attribution | None = None,
) -> tuple[GpuBatch, MapStats]:
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
) -> tuple[GpuBatch, MapStats]:
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
    """Samples -> a GpuBatch, a row per (GPU or MIG instance, pod), with the stats."""

    def __init__(self, default_node: str, rules: Attribution) -> None:
        self.default_node = default_node
        self.rules = rules
        self.stats = MapStats()
        self.batch = GpuBatch()
        self.rows: dict[RowKey, int] = {}  # GPU and pod -> its row in the batch
        self.bounds: dict[tuple[str, ...], _Bounds] = {}
        self.samples = self.known = 0

    def group(self, group: SeriesGroup) -> None:
        values = group.values
        self.samples += len(values)
        self.known += len(values.keys() & _ATTR.keys())
        found = _known_values(values, self.bounds, self.stats)
        if found:
            newest = max(group.timestamps.values()) if group.timestamps else None
            self.place(group.labels, found, newest)

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
                clean.append(column if scale == 1.0 else list(map(scale.__mul__, column)))
            else:
                messy.append(metric)
        if not attrs and not messy:
            return
        if not messy and _Columns(block.labels, self).add(attrs, clean):
            return
        rows: Iterable[tuple[float, ...]] = zip(*clean, strict=True) if clean else repeat(())
        place = self.place
        for index, (labels, row) in enumerate(zip(block.labels, rows, strict=False)):
            found = dict(zip(attrs, row, strict=True))
            if messy:
                raw = {metric: block.columns[metric][index] for metric in messy}
                found.update(_known_values(raw, self.bounds, self.stats))
            if found:
                place(labels, found, None)

    def place(
        self, labels: Mapping[str, str], found: dict[str, float], newest: float | None
    ) -> None:
        stats = self.stats
        sample = _gpu_sample(labels, self.default_node, self.rules, stats)
        if isinstance(sample, str):
            stats.skip(sample, len(found))
            return
        self.add(sample, found, newest)

    def add(self, sample: GpuSample, found: Mapping[str, float], newest: float | None) -> None:
        """A row for the sample's GPU and pod, or more values for the row it has."""
        key, pod = sample.key, sample.pod
        row_key = (*key, *(pod or _NO_POD))
        row = self.rows.get(row_key)
        if row is None:
            self.rows[row_key] = self.batch.append(sample, found, newest)
        else:  # the same GPU and pod, met in another label set
            self.batch.update(row, found, newest)
        self.stats.used += len(found)

    def result(self) -> tuple[GpuBatch, MapStats]:
        self.stats.samples = self.samples
        self.stats.unknown_metric = self.samples - self.known
        return self.batch, self.stats


_NO_POD = ("", "", "")


# Labels that send a block label set by label set: the pod spellings whose rules pod_of applies
# per label set (prometheus-operator's target labels, the renamed and the old pod labels).
_ONE_BY_ONE = frozenset(
    {
        "service",
        "endpoint",
        "exported_pod",
        "exported_namespace",
        "exported_container",
        "pod_name",
        "pod_namespace",
        "container_name",
    }
)
# The labels placement rules read (telemetry.placement): label sets alike in these are placed alike.
_PLACEMENT = (*NODE_LABELS, "Hostname", "hostname", "instance")


class _Columns:
    """The label sets of one ColumnBlock, mapped a column at a time (the module's docstring)."""

    def __init__(self, labels: Sequence[Mapping[str, str]], mapper: _Mapper) -> None:
        self.labels = labels
        self.mapper = mapper
        self.names = set(chain.from_iterable(labels))  # every label name met
        # The parser's label sets are dicts: dict.get is called at C level, twice as fast as
        # a method looked up on each.
        self.dicts = set(map(type, labels)) <= {dict}

    def column(self, name: str) -> list[str]:
        if name not in self.names:
            return [""] * len(self.labels)
        if self.dicts:
            return list(map(dict.get, self.labels, repeat(name), repeat("")))  # type: ignore[arg-type]
        return list(map(methodcaller("get", name, ""), self.labels))

    def add(self, attrs: list[str], values: list[list[float]]) -> bool:
        """Add a row per label set, with these values (in range and scaled), to the batch;
        False, having changed nothing, if the block must be read label set by label set."""
        names, count = self.names, len(self.labels)
        if not names.isdisjoint(_ONE_BY_ONE) or {"UUID", "uuid"} <= names:
            return False
        indexes = list(map(_INDEXES.get, self.column("gpu")))
        if None in indexes:  # not all plain indexes: the reason of each, label set by label set
            return False
        pod = self.column("pod")
        namespace, container = self.column("namespace"), self.column("container")
        if "" in pod:  # no pod: its namespace and container are not kept either
            namespace = [name if held else "" for held, name in zip(pod, namespace, strict=True)]
            container = [name if held else "" for held, name in zip(pod, container, strict=True)]
        labels: dict[str, list[Any]] = {
            "gpu_index": indexes,
            "mig_instance": self.column("GPU_I_ID"),
            "uuid": self.column("uuid" if "uuid" in names else "UUID"),
            "model_name": self.column("modelName"),
            "pci_bus_id": self.column("pci_bus_id"),
            "mig_profile": self.column("GPU_I_PROFILE"),
            "namespace": namespace,
            "pod": pod,
            "container": container,
        }
        for name, column in labels.items():
            if name in LABEL_LIMITS and count and max(map(len, column)) > LABEL_LIMITS[name]:
                return False  # which label is too long is told label set by label set
        keep = self._place(labels, len(attrs))
        kept = count if keep is None else sum(keep)
        if keep is not None:
            labels = {name: list(compress(column, keep)) for name, column in labels.items()}
            values = [list(compress(column, keep)) for column in values]
        mapper, batch = self.mapper, self.mapper.batch
        start = len(batch)
        row_keys = list(zip(*(labels[name] for name in _ROW_KEY), strict=True))
        rows = dict(zip(row_keys, range(start, start + kept), strict=True))
        if len(rows) == kept and mapper.rows.keys().isdisjoint(rows):
            mapper.rows.update(rows)
            columns = {attr: list(column) for attr, column in zip(attrs, values, strict=True)}
            batch.extend_columns(labels, columns, kept)
            mapper.stats.used += kept * len(attrs)
            return True
        # A GPU and pod met twice: row by row, the second adding its values to the first's row.
        for row, row_values in enumerate(zip(*values, strict=True)):
            node, index, mig_instance, namespace_, pod_, container_ = row_keys[row]
            sample = GpuSample(
                GpuKey(node, index, mig_instance),
                labels["uuid"][row],
                labels["model_name"][row],
                labels["pci_bus_id"][row],
                labels["mig_profile"][row],
                PodRef(namespace_, pod_, container_) if pod_ else None,
            )
            mapper.add(sample, dict(zip(attrs, row_values, strict=True)), None)
        return True

    def _place(self, labels: dict[str, list[Any]], fields: int) -> list[bool] | None:
        """Place the label sets on nodes (labels["node"]) by the rules, run once per distinct
        naming in the order met, with the counts label set by label set would make; which label
        sets to keep (None: all)."""
        mapper, count = self.mapper, len(self.labels)
        stats, rules, target = mapper.stats, mapper.rules, mapper.default_node
        namings = [self.column(name) for name in _PLACEMENT if name in self.names]
        keys: list[Any] = [()] * count  # no label names a node: the scrape target does
        if len(namings) == 1:
            keys = namings[0]
        elif namings:
            keys = list(zip(*namings, strict=True))
        first = dict(zip(reversed(keys), range(count - 1, -1, -1), strict=True))
        sizes = Counter(keys)
        placed: dict[object, Placement] = {}
        dropped = False
        for key in dict.fromkeys(keys):
            placement = placed[key] = rules.place(self.labels[first[key]], target)
            node, rule, named = placement
            if not node:
                examples = stats.unknown_nodes
                if named and len(examples) < stats.MAX_EXAMPLES and named not in examples:
                    examples.append(named)
                stats.skip(rule, sizes[key] * fields)
                dropped = True
                continue
            stats.attributed[rule] = stats.attributed.get(rule, 0) + sizes[key]
            if len(node) > LABEL_LIMITS["node"]:
                stats.skip(f"{LABEL_TOO_LONG}: node", sizes[key] * fields)
                placed[key] = Placement("", rule)
                dropped = True
        nodes = [placement.node for placement in map(placed.__getitem__, keys)]
        labels["node"] = nodes
        return list(map(bool, nodes)) if dropped else None


_ROW_KEY = ("node", "gpu_index", "mig_instance", "namespace", "pod", "container")


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
    target: str,
    rules: Attribution,
    stats: MapStats,
) -> GpuSample | str:
    """The GPU (and pod) a label set names (no values yet), or why it names none that can be
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
    return GpuSample(key, uuid, model_name, get("pci_bus_id", ""), mig_profile, pod)


_LIMIT_NODE, _LIMIT_UUID, _LIMIT_MODEL, _LIMIT_MIG_INSTANCE, _LIMIT_MIG_PROFILE = (
    LABEL_LIMITS[k] for k in ("node", "uuid", "model_name", "mig_instance", "mig_profile")
)
_LIMIT_POD = min(LABEL_LIMITS[k] for k in ("namespace", "pod", "container"))
