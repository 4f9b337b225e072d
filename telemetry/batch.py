"""The GPUs of one fetch, as columns. Pure: no Django, no I/O.

A 5,000-node scrape is 40,000 GPUs: one Python object per GPU (and a dict of its values) cost more
than parsing the text did. So the mapper (telemetry.dcgm) fills one `GpuBatch`: a list per label
(node, GPU index, pod, ...) and per DCGM field, row i of each being one GPU (or MIG instance) as
seen for one pod (or none). The store (telemetry.services.samples_ingest) and the holders check
(telemetry.holders) read those lists whole, with C-level zips, never row by row.

`GpuSample` is one row of it, built on demand (`batch[i]`, iteration): for readers of a few GPUs
and for tests, who may also build a batch from samples (`GpuBatch.from_samples`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, cast, overload

__all__ = ["GpuBatch", "GpuKey", "GpuSample", "PodRef", "busy_ratio"]


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


# The key of a row: its GPU and its pod ("", "", "" for none).
RowKey = tuple[str, int, str, str, str, str]
Column = list[float | None]

_LABELS = (
    "node",
    "gpu_index",
    "mig_instance",
    "uuid",
    "model_name",
    "pci_bus_id",
    "mig_profile",
    "namespace",
    "pod",
    "container",
    "timestamp",
)


@dataclass(slots=True)
class GpuBatch:
    """GPUs (or MIG instances) as columns: row i of every list is one GPU as seen for one pod.

    A pod's three columns are "" where no pod was seen. `values` has a column per DCGM field that
    any row reported (FieldSpec.attr -> value in its unit, None where that row has none).
    """

    node: list[str] = field(default_factory=list)
    gpu_index: list[int] = field(default_factory=list)
    mig_instance: list[str] = field(default_factory=list)
    uuid: list[str] = field(default_factory=list)
    model_name: list[str] = field(default_factory=list)
    pci_bus_id: list[str] = field(default_factory=list)
    mig_profile: list[str] = field(default_factory=list)
    namespace: list[str] = field(default_factory=list)
    pod: list[str] = field(default_factory=list)
    container: list[str] = field(default_factory=list)
    timestamp: list[float | None] = field(default_factory=list)  # Unix seconds, where given
    values: dict[str, Column] = field(default_factory=dict)

    @classmethod
    def from_samples(cls, samples: Iterable[GpuSample]) -> GpuBatch:
        batch = cls()
        for sample in samples:
            batch.append(sample, sample.values)
        return batch

    def __len__(self) -> int:
        return len(self.node)

    @overload
    def __getitem__(self, row: int) -> GpuSample: ...
    @overload
    def __getitem__(self, row: slice) -> list[GpuSample]: ...
    def __getitem__(self, row: int | slice) -> GpuSample | list[GpuSample]:
        """Row `row` as a GpuSample (a copy: changing it leaves the batch as it was)."""
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        pod = self.pod[row]
        values = {attr: column[row] for attr, column in self.values.items()}
        return GpuSample(
            GpuKey(self.node[row], self.gpu_index[row], self.mig_instance[row]),
            self.uuid[row],
            self.model_name[row],
            self.pci_bus_id[row],
            self.mig_profile[row],
            PodRef(self.namespace[row], pod, self.container[row]) if pod else None,
            {attr: value for attr, value in values.items() if value is not None},
            self.timestamp[row],
        )

    def __iter__(self) -> Iterator[GpuSample]:
        return (self[row] for row in range(len(self)))

    def key(self, row: int) -> RowKey:
        return (
            self.node[row],
            self.gpu_index[row],
            self.mig_instance[row],
            self.namespace[row],
            self.pod[row],
            self.container[row],
        )

    def append(
        self, sample: GpuSample, values: Mapping[str, float], timestamp: float | None = None
    ) -> int:
        """Add `sample`'s GPU and pod with `values` (and `timestamp`, else the sample's) as a row;
        returns the row."""
        row = len(self)
        key, pod = sample.key, sample.pod
        self.node.append(key.node)
        self.gpu_index.append(key.gpu_index)
        self.mig_instance.append(key.mig_instance)
        self.uuid.append(sample.uuid)
        self.model_name.append(sample.model_name)
        self.pci_bus_id.append(sample.pci_bus_id)
        self.mig_profile.append(sample.mig_profile)
        self.namespace.append("" if pod is None else pod.namespace)
        self.pod.append("" if pod is None else pod.pod)
        self.container.append("" if pod is None else pod.container)
        self.timestamp.append(sample.timestamp if timestamp is None else timestamp)
        for column in self.values.values():
            column.append(None)
        self.update(row, values)
        return row

    def update(self, row: int, values: Mapping[str, float], timestamp: float | None = None) -> None:
        """More values for a row (the same GPU and pod met in another label set); its timestamp
        becomes the newer of the two."""
        columns = self.values
        for attr, value in values.items():
            column = columns.get(attr)
            if column is None:
                column = columns[attr] = [None] * len(self)
            column[row] = value
        if timestamp is not None:
            current = self.timestamp[row]
            if current is None or timestamp > current:
                self.timestamp[row] = timestamp

    def extend(self, other: GpuBatch) -> None:
        """Add the rows of `other` after these."""
        size, added = len(self), len(other)
        for name in _LABELS:
            getattr(self, name).extend(getattr(other, name))
        for attr, column in self.values.items():
            column.extend(other.values.get(attr) or [None] * added)
        for attr, column in other.values.items():
            if attr not in self.values:
                self.values[attr] = _nones(size) + column

    def extend_columns(
        self,
        labels: Mapping[str, list[Any]],
        values: Mapping[str, Sequence[float | None]],
        rows: int,
    ) -> None:
        """Add `rows` rows given as columns: `labels` by name (every label column of the batch
        but the timestamp, which is None), `values` by field (absent ones None)."""
        size = len(self)
        for name in _LABELS[:-1]:
            getattr(self, name).extend(labels[name])
        self.timestamp.extend([None] * rows)
        for attr, column in self.values.items():
            column.extend(values.get(attr) or [None] * rows)
        for attr, added in values.items():
            if attr not in self.values:
                self.values[attr] = [*_nones(size), *added]

    def forget_timestamps(self) -> None:
        """Every row's age starts at the fetch (a source whose timestamps are not the
        measurements')."""
        self.timestamp = [None] * len(self)

    def busy(self) -> Column:
        """busy_ratio() of every row."""
        engine = self.values.get("gr_engine_active")
        util = self.values.get("gpu_util")
        if engine is None and util is None:
            return [None] * len(self)
        if engine is None:
            chosen = util
        elif util is None or None not in engine:
            chosen = engine
        else:
            chosen = list(map(_either, engine, util))
        assert chosen is not None
        if None not in chosen:
            numbers = cast(list[float], chosen)
            if not numbers or (min(numbers) >= 0.0 and max(numbers) <= 1.0):
                return chosen  # mapped values are within their range already
        return [None if value is None else min(max(value, 0.0), 1.0) for value in chosen]


def _nones(count: int) -> Column:
    return [None] * count


def _either(first: float | None, second: float | None) -> float | None:
    return second if first is None else first
